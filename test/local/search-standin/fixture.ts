/**
 * The search stand-in's tests (test/local/search-standin*.test.ts): `useStandIn` starts a stand-in
 * for the file's tests and stops it after; `url` is its address (a live binding), and `req`,
 * `bulk`, `idx` and `del` speak to it.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read the stand-in's JSON answers field by field, as untyped wire data */
import { afterAll, beforeAll } from 'vitest';
import { SearchStandIn } from '../../../local/search-standin.ts';

export let url: string;

export function useStandIn(standin: SearchStandIn = new SearchStandIn({ defaultGcDeletesMs: 60_000 })): void {
  beforeAll(async () => {
    url = await standin.start();
  });
  afterAll(async () => {
    await standin.stop();
  });
}

export async function req(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const text = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
  const res = await fetch(`${url}${path}`, { method, body: text, headers: { 'content-type': 'application/json' } });
  const t = await res.text();
  return { status: res.status, body: t === '' ? null : JSON.parse(t) };
}

export function bulk(lines: unknown[]): Promise<{ status: number; body: any }> {
  return req('POST', '/_bulk', `${lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n')}\n`);
}

export const idx = (id: string, version: number | string, type = 'external', index = 'v') =>
  `{"index":{"_index":"${index}","_id":"${id}","version":${version},"version_type":"${type}"}}`;
export const del = (id: string, version: number | string, type = 'external', index = 'v') =>
  `{"delete":{"_index":"${index}","_id":"${id}","version":${version},"version_type":"${type}"}}`;
