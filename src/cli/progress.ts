import cliProgress from 'cli-progress';

export interface Progress {
  /** `done` counts records; `ratio`, when known, is the share of the work done (bytes read of the file). */
  update(done: number, ratio?: number): void;
  stop(): void;
}

const SILENT: Progress = { update: () => {}, stop: () => {} };

/**
 * A progress bar on stderr when stderr is a terminal, else nothing: stdout carries data (exports) and
 * pipes, CI logs and tests get only the summary line. `total` is the expected record count when known;
 * `byRatio` says the caller passes the share done instead (an import knows the file size, not the count).
 */
export function progressBar(verb: string, size: { total?: number; byRatio?: boolean } = {}, stream = process.stderr): Progress {
  if (!stream.isTTY) return SILENT;
  const total = size.total ?? 0;
  const known = size.byRatio === true || total > 0;
  const bar = new cliProgress.SingleBar(
    {
      format: known ? `${verb} |{bar}| {percentage}% | {records} records | {eta_formatted} left` : `${verb} {records} records`,
      stream,
      hideCursor: true,
      // The bar goes away at the end; the summary line that follows says what happened.
      clearOnComplete: true,
      etaBuffer: 50,
    },
    cliProgress.Presets.shades_classic,
  );
  const scale = 1000;
  bar.start(known ? scale : 1, 0, { records: 0 });
  let stopped = false;
  return {
    update(done, ratio) {
      const share = ratio ?? (total > 0 ? done / total : 0);
      bar.update(Math.min(scale, Math.round(share * scale)), { records: done });
    },
    stop() {
      if (stopped) return;
      stopped = true;
      bar.stop();
    },
  };
}

/** The one line every import and export ends with, on stderr: what, how many, how long, how fast. */
export function summaryLine(what: string, records: number, startedAt: bigint): string {
  const seconds = Number(process.hrtime.bigint() - startedAt) / 1e9;
  const rate = Math.round(records / Math.max(seconds, 0.001));
  return `${what} in ${seconds.toFixed(1)} s (${rate} records/s)`;
}
