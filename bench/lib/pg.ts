/**
 * Small PostgreSQL helpers for the benchmarks: one-off queries, COPY of generated text, and
 * waiting for a condition.
 */
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { sleep } from './report.ts';

/** Runs `fn` with a connected client, then closes it. */
export async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Runs SQL text (one or more statements) on a fresh connection. */
export async function exec(url: string, sql: string): Promise<void> {
  await withClient(url, async (c) => {
    await c.query(sql);
  });
}

/** First row of a query on a fresh connection. */
export async function one<T>(url: string, sql: string, values: unknown[] = []): Promise<T> {
  return withClient(url, async (c) => (await c.query(sql, values)).rows[0] as T);
}

/** Streams lines into `COPY <target> FROM STDIN` (text format) on `client`, in 64 kB chunks. */
export async function copyLines(client: pg.ClientBase, target: string, lines: Iterable<string>): Promise<void> {
  const chunks = function* (): Generator<string> {
    let buf = '';
    for (const l of lines) {
      buf += l;
      if (buf.length >= 1 << 16) {
        yield buf;
        buf = '';
      }
    }
    if (buf) yield buf;
  };
  await pipeline(Readable.from(chunks()), client.query(copyFrom(`COPY ${target} FROM STDIN`)));
}

/** Polls `check` every `everyMs` until it returns true; throws after `timeoutMs` with `what`. */
export async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs = 120_000, everyMs = 5): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${Math.round(timeoutMs / 1000)} s waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** `SHOW server_version` of a cluster. */
export async function serverVersion(url: string): Promise<string> {
  return (await one<{ server_version: string }>(url, 'SHOW server_version')).server_version;
}
