import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { exportJWK, UnsecuredJWT } from 'jose';
import { loadConfig } from '../../src/config.js';
import type { Store } from '../../src/store/store.js';
import { assertError } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, rawRequest, seed, startApp, type RawResponse, type RunningApp } from '../helpers/http-app.js';
import {
  AUDIENCE,
  ISSUER,
  mintJwt,
  SECRET,
  secretKey,
  signingKey,
  startJwksServer,
  type JwksServer,
  type SigningKey,
} from '../helpers/jwt.js';

// JWT bearer tokens from an identity provider, minted here with jose, checked over a real socket.

const jwtFlags = { jwtIssuer: ISSUER, jwtAudience: AUDIENCE, jwtGroupsClaim: 'groups' };
const hsEnv = { PLANTSTORE_JWT_SECRET: SECRET };

/** alice owns "Basil"; "Aloe" is public; "Fern" is shared with group gardeners; "Orchid" is bob's alone. */
async function seedCatalogue(store: Store): Promise<Record<string, string>> {
  const { tokens } = await seed(store, {
    users: [{ name: 'alice' }, { name: 'bob' }, { name: 'root', admin: true }],
    groups: [{ name: 'gardeners' }, { name: 'botanists' }],
    plants: [
      { name: 'Basil', tag: 'herb', owner: 'alice' },
      { name: 'Aloe', owner: 'bob', public: true },
      { name: 'Fern', owner: 'bob', sharedWith: [{ group: 'gardeners' }] },
      { name: 'Orchid', owner: 'bob' },
    ],
  });
  return tokens;
}

const plantNames = (res: RawResponse): string[] => {
  assert.equal(res.status, 200, res.text);
  return (res.body as Array<{ name: string }>).map((p) => p.name);
};

/** A 401 for a presented token: the code, RFC 6750 header with error_description, and no token echoed. */
function assertRejected(res: RawResponse, code: number, token: string, description: RegExp): void {
  const body = assertError(res, 401, code);
  const challenge = String(res.headers['www-authenticate']);
  assert.match(challenge, /^Bearer realm="plantstore", error="invalid_token", error_description="[^"\\]*"$/);
  assert.match(challenge, description);
  assert.match(body.message, description);
  assert.ok(!res.text.includes(token) && !challenge.includes(token), 'the token is never echoed');
  const [, payload] = token.split('.');
  if (payload) assert.ok(!res.text.includes(payload) && !challenge.includes(payload), 'no part of the token is echoed');
}

after(() => cleanupBackends());

for (const backend of BACKENDS) {
  describe(`JWT bearer tokens, HMAC secret [${backend.name}]`, { skip: backend.skip }, () => {
    let store: Store;
    let server: RunningApp;
    let opaque: Record<string, string>;
    const key = secretKey();
    const get = (token: string, path = '/plants') => rawRequest(server.url, path, bearer(token));

    before(async () => {
      store = await backend.open();
      opaque = await seedCatalogue(store);
      server = await startApp(store, { config: jwtFlags, env: hsEnv });
    });
    after(async () => {
      await server?.close();
      await store?.close();
    });

    it('a valid token for a known user lists what that user may see', async () => {
      assert.deepEqual(plantNames(await get(await mintJwt(key))), ['Basil', 'Aloe']);
      assert.deepEqual(plantNames(await get(await mintJwt(key), '/plants?limit=1')), ['Basil']);
    });

    it('a JWT naming an admin acts as an ordinary user unless --jwt-admins allow', async () => {
      // root owns nothing and is in no group: as an ordinary user it sees the public plant only.
      const root = await mintJwt(key, { claims: { sub: 'root' } });
      assert.deepEqual(plantNames(await get(root)), ['Aloe']);
      assert.deepEqual(
        plantNames(await get(opaque.root!)),
        ['Basil', 'Aloe', 'Fern', 'Orchid'],
        'its opaque token still acts as the admin',
      );
      const allowing = await startApp(store, { config: { ...jwtFlags, jwtAdmins: 'allow' }, env: hsEnv });
      try {
        assert.deepEqual(plantNames(await rawRequest(allowing.url, '/plants', bearer(root))), ['Basil', 'Aloe', 'Fern', 'Orchid']);
      } finally {
        await allowing.close();
      }
    });

    it('a user or groups claim holding control characters (NUL included) is refused with 401 before any lookup', async () => {
      for (const claims of [
        { sub: 'ali\u0000ce' },
        { sub: 'alice\n' },
        { groups: ['secret\u0000staff'] },
        { groups: ['gardeners', 'x\u007f'] },
        { sub: 'csi\u009b' },
      ]) {
        const token = await mintJwt(key, { claims });
        assertRejected(await get(token), 40111, token, /control characters/);
      }
    });

    it('two JWTs with group lists that differ only in how they would be joined get their own pages', async () => {
      // Once a NUL-joined cache key made ["staff","secret"] and ["secret\u0000staff"] one page; now the second is refused
      // outright, and names that could be joined alike ("a,b" and ["a","b"]) still get pages of their own.
      const split = await mintJwt(key, { claims: { groups: ['gardeners', 'botanists'] } });
      const joined = await mintJwt(key, { claims: { groups: ['gardeners,botanists'] } });
      assert.deepEqual(plantNames(await get(split, '/plants?limit=10')), ['Basil', 'Aloe', 'Fern']);
      assert.deepEqual(plantNames(await get(joined, '/plants?limit=10')), ['Basil', 'Aloe']);
      assert.deepEqual(plantNames(await get(split, '/plants?limit=10')), ['Basil', 'Aloe', 'Fern']);
    });

    it("Plant Store's own opaque tokens keep working beside JWTs", async () => {
      assert.deepEqual(plantNames(await get(opaque.bob!)), ['Aloe', 'Fern', 'Orchid']);
    });

    it('the groups claim counts like a stored membership; unknown groups grant nothing', async () => {
      const token = await mintJwt(key, { claims: { groups: ['gardeners', 'no-such-group'] } });
      assert.deepEqual(plantNames(await get(token)), ['Basil', 'Aloe', 'Fern']);
      assert.deepEqual(plantNames(await get(await mintJwt(key, { claims: { groups: 'gardeners' } }), '/plants?limit=3')), [
        'Basil',
        'Aloe',
        'Fern',
      ]);
      assert.deepEqual(plantNames(await get(await mintJwt(key, { claims: { groups: ['botanists'] } }))), ['Basil', 'Aloe']);
      assert.deepEqual(plantNames(await get(await mintJwt(key, { claims: { groups: [] } }))), ['Basil', 'Aloe']);
    });

    it('a groups claim that is not a list of names is refused', async () => {
      const token = await mintJwt(key, { claims: { groups: { gardeners: true } } });
      assertRejected(await get(token), 40111, token, /'groups' claim must be a list of group names/);
    });

    it('expired: 401 40103; within the clock tolerance it still passes', async () => {
      const expired = await mintJwt(key, { expiresIn: -120 });
      assertRejected(await get(expired), 40103, expired, /has expired/);
      assert.deepEqual(plantNames(await get(await mintJwt(key, { expiresIn: -10 }))), ['Basil', 'Aloe']);
    });

    it('not yet valid (nbf beyond the tolerance): 401 40105; a small skew passes', async () => {
      const early = await mintJwt(key, { notBefore: 600 });
      assertRejected(await get(early), 40105, early, /not valid yet \(nbf\)/);
      assert.deepEqual(plantNames(await get(await mintJwt(key, { notBefore: 10 }))), ['Basil', 'Aloe']);
    });

    it('wrong issuer: 401 40106', async () => {
      const token = await mintJwt(key, { claims: { iss: 'https://evil.test/' } });
      assertRejected(await get(token), 40106, token, /untrusted issuer \(iss\)/);
    });

    it('wrong audience: 401 40107; one matching audience of several passes', async () => {
      const token = await mintJwt(key, { claims: { aud: 'another-api' } });
      assertRejected(await get(token), 40107, token, /not meant for this service \(aud\)/);
      assert.deepEqual(plantNames(await get(await mintJwt(key, { claims: { aud: ['another-api', AUDIENCE] } }))), ['Basil', 'Aloe']);
    });

    it('wrong signature (another secret) and a tampered payload: 401 40108', async () => {
      const other = await mintJwt(secretKey('another-secret-of-enough-length-000'));
      assertRejected(await get(other), 40108, other, /signature is not valid/);
      // Make alice an admin by rewriting the payload and keeping alice's signature.
      const [header, , signature] = (await mintJwt(key)).split('.');
      const forged = Buffer.from(
        JSON.stringify({ iss: ISSUER, aud: AUDIENCE, sub: 'root', exp: Math.floor(Date.now() / 1000) + 300 }),
      ).toString('base64url');
      const tampered = `${header}.${forged}.${signature}`;
      assertRejected(await get(tampered), 40108, tampered, /signature is not valid/);
    });

    it('alg "none" is refused: 401 40109', async () => {
      const unsecured = new UnsecuredJWT({ sub: 'root' }).setIssuer(ISSUER).setAudience(AUDIENCE).setExpirationTime('5m').encode();
      assertRejected(await get(unsecured), 40109, unsecured, /algorithm this service does not accept/);
    });

    it('an asymmetric token when only an HMAC secret is configured: 401 40109', async () => {
      const rsa = await signingKey('RS256', 'k1');
      const token = await mintJwt(rsa.privateKey, { alg: 'RS256' });
      assertRejected(await get(token), 40109, token, /algorithm this service does not accept/);
    });

    it('no exp, or no user claim: 401 40111 naming the claim', async () => {
      const noExp = await mintJwt(key, { expiresIn: null });
      assertRejected(await get(noExp), 40111, noExp, /'exp' claim is missing/);
      const noSub = await mintJwt(key, { claims: { sub: undefined } });
      assertRejected(await get(noSub), 40111, noSub, /'sub' claim naming the user/);
    });

    it('a subject with no Plant Store user is rejected by default: 401 40112', async () => {
      const token = await mintJwt(key, { claims: { sub: 'mallory' } });
      assertRejected(await get(token), 40112, token, /user this service does not know/);
      assert.ok(!(await store.users.list()).some((u) => u.name === 'mallory'), 'no user was created');
    });

    it('garbage that looks like a JWT is malformed (401 40102), never a 5xx', async () => {
      for (const token of [
        'a.b.c',
        'eyJhbGciOiJIUzI1NiJ9.e30.',
        'eyJ.eyJ.sig',
        `${Buffer.from('{"alg":"HS256"}').toString('base64url')}.bm90IGpzb24.AAAA`,
      ]) {
        const res = await get(token);
        assert.equal(res.status, 401, `${token}: ${res.text}`);
        assert.ok([40102, 40108, 40109, 40111].includes((res.body as { error: number }).error), `${token}: ${res.text}`);
      }
    });
  });

  describe(`JWT bearer tokens, provisioning and PEM public keys [${backend.name}]`, { skip: backend.skip }, () => {
    let store: Store;
    let rsa: SigningKey;
    let ed: SigningKey;
    const servers: RunningApp[] = [];
    const start = async (config: Parameters<typeof startApp>[1]) => {
      const server = await startApp(store, config);
      servers.push(server);
      return server;
    };

    before(async () => {
      store = await backend.open();
      await seedCatalogue(store);
      rsa = await signingKey('RS256', 'rsa-1');
      ed = await signingKey('EdDSA', 'ed-1');
    });
    after(async () => {
      for (const server of servers) await server.close();
      await store?.close();
    });

    it('provision mode creates an ordinary user on first sight, who sees public plants and its claim groups', async () => {
      const server = await start({ config: { ...jwtFlags, jwtUnknownUsers: 'provision' }, env: hsEnv });
      const token = await mintJwt(secretKey(), { claims: { sub: 'newcomer@example.com' } });
      assert.deepEqual(plantNames(await rawRequest(server.url, '/plants', bearer(token))), ['Aloe']);
      // Concurrent first requests of one subject create one user.
      const fresh = await mintJwt(secretKey(), { claims: { sub: 'burst', groups: ['gardeners'] } });
      const results = await Promise.all(Array.from({ length: 8 }, () => rawRequest(server.url, '/plants', bearer(fresh))));
      for (const res of results) assert.deepEqual(plantNames(res), ['Aloe', 'Fern']);
      const users = (await store.users.list()).filter((u) => u.name === 'newcomer@example.com' || u.name === 'burst');
      assert.equal(users.length, 2);
      assert.ok(users.every((u) => !u.admin));
      // A subject that is not a usable user name is refused, not stored.
      for (const sub of ['group:admins', '.', '..']) {
        const bad = await mintJwt(secretKey(), { claims: { sub } });
        assertRejected(await rawRequest(server.url, '/plants', bearer(bad)), 40111, bad, /not a usable user name/);
      }
      assert.ok(!(await store.users.list()).some((u) => u.name === '.' || u.name === '..'), 'no user named "." or ".."');
    });

    it('provision mode refuses a name that looks like an existing user, or holds invisible characters, and creates nothing', async () => {
      const server = await start({ config: { ...jwtFlags, jwtUnknownUsers: 'provision' }, env: hsEnv });
      const before = (await store.users.list()).length;
      // alice exists; these all read as "alice" (case, a Cyrillic a, fullwidth letters, a zero-width space).
      for (const sub of ['ALICE', '\u0430lice', '\uff41\uff4c\uff49\uff43\uff45', 'alice\u200b', 'al\u200dice']) {
        const token = await mintJwt(secretKey(), { claims: { sub } });
        assertRejected(
          await rawRequest(server.url, '/plants', bearer(token)),
          40111,
          token,
          /looks like an existing one|not a usable user name/,
        );
      }
      assert.equal((await store.users.list()).length, before, 'no look-alike user was created');
      // The user itself, and a name that only shares letters, still pass.
      assert.deepEqual(
        plantNames(await rawRequest(server.url, '/plants', bearer(await mintJwt(secretKey(), { claims: { sub: 'alice' } })))),
        ['Basil', 'Aloe'],
      );
      assert.equal(
        (await rawRequest(server.url, '/plants', bearer(await mintJwt(secretKey(), { claims: { sub: 'alicia' } })))).status,
        200,
      );
    });

    it('an RS256 public key (PEM): valid tokens pass; HS256 signed with the public key text is refused (no alg confusion)', async () => {
      const server = await start({ config: { ...jwtFlags, jwtPublicKey: rsa.publicPem } });
      const good = await mintJwt(rsa.privateKey, { alg: 'RS256' });
      assert.deepEqual(plantNames(await rawRequest(server.url, '/plants', bearer(good))), ['Basil', 'Aloe']);
      const ps = await mintJwt(rsa.privateKey, { alg: 'PS256' }).catch(() => undefined);
      if (ps)
        assert.equal(
          (await rawRequest(server.url, '/plants', bearer(ps))).status,
          401,
          'a PS256 signature from an RS256 key object does not verify',
        );
      const confused = await mintJwt(new TextEncoder().encode(rsa.publicPem), { alg: 'HS256' });
      assertRejected(await rawRequest(server.url, '/plants', bearer(confused)), 40109, confused, /algorithm this service does not accept/);
      const otherRsa = await signingKey('RS256', 'rsa-2');
      const forged = await mintJwt(otherRsa.privateKey, { alg: 'RS256' });
      assertRejected(await rawRequest(server.url, '/plants', bearer(forged)), 40108, forged, /signature is not valid/);
    });

    it('an Ed25519 public key (PEM) verifies EdDSA tokens and refuses ES256 ones', async () => {
      const server = await start({ config: { ...jwtFlags, jwtPublicKey: ed.publicPem } });
      assert.deepEqual(plantNames(await rawRequest(server.url, '/plants', bearer(await mintJwt(ed.privateKey, { alg: 'EdDSA' })))), [
        'Basil',
        'Aloe',
      ]);
      const es = await signingKey('ES256', 'es-1');
      const token = await mintJwt(es.privateKey, { alg: 'ES256' });
      assertRejected(await rawRequest(server.url, '/plants', bearer(token)), 40109, token, /algorithm this service does not accept/);
    });
  });

  describe(`JWT bearer tokens from a JWKS endpoint [${backend.name}]`, { skip: backend.skip }, () => {
    let store: Store;
    let jwks: JwksServer;
    let server: RunningApp;
    let first: SigningKey;
    let second: SigningKey;
    const get = (token: string) => rawRequest(server.url, '/plants', bearer(token));
    const waitForCooldown = () => new Promise((resolve) => setTimeout(resolve, 1_100));

    before(async () => {
      store = await backend.open();
      await seedCatalogue(store);
      first = await signingKey('RS256', 'key-1');
      second = await signingKey('ES256', 'key-2');
      jwks = await startJwksServer([first.publicJwk]);
      server = await startApp(store, { config: { ...jwtFlags, jwksUrl: jwks.url, jwksCooldown: 1 } });
    });
    after(async () => {
      await server?.close();
      await jwks?.stop();
      await store?.close();
    });

    it('fetches the key set at start and verifies tokens from the cache', async () => {
      assert.equal(jwks.fetches, 1, 'fetched once when the server became ready');
      for (let i = 0; i < 5; i++)
        assert.deepEqual(plantNames(await get(await mintJwt(first.privateKey, { alg: 'RS256', kid: 'key-1' }))), ['Basil', 'Aloe']);
      assert.equal(jwks.fetches, 1, 'no fetch per request');
    });

    it('unknown kid: 401 40110, and a burst of unknown kids refetches at most once per cooldown', async () => {
      await waitForCooldown();
      const before = jwks.fetches;
      const stranger = await signingKey('RS256', 'stranger');
      for (let i = 0; i < 10; i++) {
        const token = await mintJwt(stranger.privateKey, { alg: 'RS256', kid: `unknown-${i}` });
        assertRejected(await get(token), 40110, token, /unknown key \(kid\)/);
      }
      assert.ok(jwks.fetches - before <= 1, `refetched ${jwks.fetches - before} times for 10 unknown kids`);
    });

    it('key rotation at the provider needs no restart: a token with the new kid triggers a refetch', async () => {
      jwks.publish([first.publicJwk, second.publicJwk]);
      await waitForCooldown();
      const token = await mintJwt(second.privateKey, { alg: 'ES256', kid: 'key-2' });
      assert.deepEqual(plantNames(await get(token)), ['Basil', 'Aloe']);
    });

    it('a JWKS "oct" key cannot be used to verify HMAC tokens', async () => {
      const oct = { ...(await exportJWK(secretKey())), kid: 'oct-1', alg: 'HS256' };
      jwks.publish([first.publicJwk, second.publicJwk, oct]);
      await waitForCooldown();
      const token = await mintJwt(secretKey(), { alg: 'HS256', kid: 'oct-1' });
      assertRejected(await get(token), 40109, token, /algorithm this service does not accept/);
    });

    it('while the JWKS endpoint is down, cached keys keep working; a new kid gets 503 50302 with Retry-After, and it recovers', async () => {
      await jwks.stop();
      assert.deepEqual(plantNames(await get(await mintJwt(first.privateKey, { alg: 'RS256', kid: 'key-1' }))), ['Basil', 'Aloe']);
      assert.deepEqual(plantNames(await get(await mintJwt(second.privateKey, { alg: 'ES256', kid: 'key-2' }))), ['Basil', 'Aloe']);
      const third = await signingKey('RS256', 'key-3');
      await waitForCooldown();
      const res = await get(await mintJwt(third.privateKey, { alg: 'RS256', kid: 'key-3' }));
      assertError(res, 503, 50302);
      // The fetch just failed, so the next is a cooldown (1 s here) away.
      assert.equal(res.headers['retry-after'], '1');
      jwks.publish([first.publicJwk, third.publicJwk]);
      await jwks.start();
      await waitForCooldown();
      assert.deepEqual(plantNames(await get(await mintJwt(third.privateKey, { alg: 'RS256', kid: 'key-3' }))), ['Basil', 'Aloe']);
    });

    it('an answer of 200 that is not a key set is a failed fetch: unknown kids refetch at most once per cooldown', async () => {
      const stranger = await signingKey('RS256', 'stranger');
      for (const body of ['<html>Service Unavailable</html>', '{"error":"maintenance"}', '{"keys":"none"}']) {
        jwks.publish(body);
        await waitForCooldown();
        const before = jwks.fetches;
        for (let i = 0; i < 10; i++) {
          const res = await get(await mintJwt(stranger.privateKey, { alg: 'RS256', kid: `unknown-${i}` }));
          assertError(res, 503, 50302);
          assert.ok(Number(res.headers['retry-after']) >= 1, body);
        }
        assert.equal(jwks.fetches - before, 1, `${body}: fetched ${jwks.fetches - before} times for 10 unknown kids`);
        // The cached keys still verify.
        assert.deepEqual(plantNames(await get(await mintJwt(first.privateKey, { alg: 'RS256', kid: 'key-1' }))), ['Basil', 'Aloe']);
      }
      jwks.publish([first.publicJwk]);
    });
  });
}

describe('JWT configuration is validated at start', () => {
  const env = { PLANTSTORE_JWT_ISSUER: ISSUER, PLANTSTORE_JWT_AUDIENCE: AUDIENCE };
  const fails = (input: Parameters<typeof loadConfig>[0], extraEnv: NodeJS.ProcessEnv, message: RegExp) =>
    assert.throws(() => loadConfig(input, { ...env, ...extraEnv }), message);

  it('no key source means JWTs are off', () => {
    assert.equal(loadConfig({}, {}).app.jwt, undefined);
    fails({}, {}, /issuer\/audience are set but no key/);
  });

  it('exactly one key source, with issuer and audience', () => {
    fails({ jwksUrl: 'https://idp.test/jwks' }, hsEnv, /only one JWT key source/);
    assert.throws(() => loadConfig({ jwksUrl: 'https://idp.test/jwks' }, { PLANTSTORE_JWT_AUDIENCE: AUDIENCE }), /expected issuer/);
    assert.throws(() => loadConfig({ jwksUrl: 'https://idp.test/jwks' }, { PLANTSTORE_JWT_ISSUER: ISSUER }), /expected audience/);
    fails({ jwksUrl: 'ftp://idp.test/jwks' }, {}, /use https/);
  });

  it('an HMAC secret must be at least 32 bytes, and only HS algorithms its length allows', () => {
    fails({}, { PLANTSTORE_JWT_SECRET: 'short' }, /needs at least 32/);
    assert.deepEqual(loadConfig({}, { ...env, ...hsEnv }).app.jwt?.algorithms, ['HS256']);
    fails({ jwtAlgorithms: 'HS512' }, hsEnv, /HS512 cannot be used/);
    fails({ jwtAlgorithms: 'RS256' }, hsEnv, /RS256 cannot be used/);
  });

  it('a public key picks its algorithms from its type; HMAC and none are never possible with it', async () => {
    const rsa = await signingKey('RS256', 'k');
    assert.deepEqual(loadConfig({ jwtPublicKey: rsa.publicPem }, env).app.jwt?.algorithms, [
      'RS256',
      'RS384',
      'RS512',
      'PS256',
      'PS384',
      'PS512',
    ]);
    fails({ jwtPublicKey: rsa.publicPem, jwtAlgorithms: 'HS256' }, {}, /HS256 cannot be used/);
    fails({ jwtPublicKey: rsa.publicPem, jwtAlgorithms: 'none' }, {}, /none cannot be used/);
    fails({ jwtPublicKey: '-----BEGIN PUBLIC KEY-----\nnot a key\n-----END PUBLIC KEY-----' }, {}, /not a PEM public key/);
    fails({ jwtPublicKey: '/no/such/key.pem' }, {}, /cannot read JWT public key file/);
    const es = await signingKey('ES256', 'k');
    assert.deepEqual(loadConfig({ jwtPublicKey: es.publicPem }, env).app.jwt?.algorithms, ['ES256']);
  });

  it('other settings are checked too', () => {
    fails({ jwtUnknownUsers: 'maybe' }, hsEnv, /expected reject or provision/);
    fails({ jwtClockTolerance: '-1' }, hsEnv, /invalid --jwt-clock-tolerance "-1"/);
    fails({ jwtClockTolerance: '3600' }, hsEnv, /invalid --jwt-clock-tolerance "3600"/);
    const jwt = loadConfig({ jwtAudience: 'a, b' }, { ...env, ...hsEnv }).app.jwt;
    assert.deepEqual(jwt?.audience, ['a', 'b']);
    assert.equal(jwt?.userClaim, 'sub');
    assert.equal(jwt?.unknownUsers, 'reject');
  });
});
