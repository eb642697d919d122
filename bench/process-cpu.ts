import { readFileSync, readdirSync } from 'node:fs';

/** Clock ticks per second of /proc's utime and stime (USER_HZ: 100 on Linux for every architecture we run on). */
const TICKS_PER_SECOND = 100;

/** The direct children of `pid` (Linux 3.5+ lists them per thread under /proc/PID/task/TID/children). */
function childrenOf(pid: number): number[] {
  const children: number[] = [];
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const text = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
      if (text !== '') children.push(...text.split(/\s+/).map(Number));
    }
  } catch {
    // The process is gone: it has no children to count.
  }
  return children;
}

/** utime + stime of one process (all its threads), in seconds; 0 once it is gone. */
function ownCpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count fields after its closing one.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

/**
 * The CPU time a server has used so far: the process and, for `serve --workers`, its live children (the
 * workers), in seconds. Read before and after a run; the difference over the requests answered is the
 * server's own CPU per request, which does not depend on how much of the machine the load generator took.
 */
export function serverCpuSeconds(pid: number): number {
  return ownCpuSeconds(pid) + childrenOf(pid).reduce((sum, child) => sum + ownCpuSeconds(child), 0);
}

/**
 * utime + stime of every PostgreSQL server process on this machine, with the times of those that have exited (which
 * their postmaster reaped: its cutime + cstime), in seconds. Read before and after a run, the difference is the
 * database's CPU over it, whatever connections came and went meanwhile (pgbench's backends end with it).
 */
export function postgresCpuSeconds(): number {
  let total = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) !== 'postgres') continue;
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      total += (Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) / TICKS_PER_SECOND;
    } catch {
      // The process ended between the listing and the read: its time is in its postmaster's from now on.
    }
  }
  return total;
}
