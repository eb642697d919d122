# syntax=docker/dockerfile:1
# Plant Store: build with the dev dependencies, run with the production ones only, as a non-root user.

FROM node:20-bookworm-slim AS build
WORKDIR /app
# better-sqlite3 downloads a prebuilt binary; the toolchain is only the fallback should none match.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
# No install scripts yet ("prepare" would build before the sources are here); then only the native module's.
RUN npm ci --ignore-scripts --no-audit --no-fund && npm rebuild better-sqlite3
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY scripts/bundle-dependencies.ts ./scripts/bundle-dependencies.ts
# The service only: the typed client (npm run build builds it too) is not part of the image.
RUN npm run build:service && npm prune --omit=dev --ignore-scripts

FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production \
    PLANTSTORE_HOST=0.0.0.0 \
    PLANTSTORE_PORT=8080 \
    PLANTSTORE_DB=/data/plantstore.db
WORKDIR /app
COPY --from=build --chown=root:root /app/package.json ./
COPY --from=build --chown=root:root /app/node_modules ./node_modules
COPY --from=build --chown=root:root /app/dist ./dist
# The default SQLite database lives in a volume the unprivileged user owns; code stays read-only to it.
RUN mkdir -p /data && chown node:node /data
VOLUME ["/data"]
USER node
EXPOSE 8080
# Liveness through the service's own endpoint, with node (the slim image has no curl).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PLANTSTORE_PORT || 8080) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# Any CLI command works too: docker run --rm -v plantstore-data:/data IMAGE tokens create alice
ENTRYPOINT ["node", "dist/cli/main.js"]
CMD ["serve"]
