/**
 * PostgreSQL's own streaming client for logical slots, `pg_recvlogical`, as the capture
 * benchmark's client reference (docs/performance.md, "Current figures"): it reads a `test_decoding` slot
 * with the capture's options and session settings over the same replication protocol and writes
 * the text to a file, and exits at an end position. The capture's client work (parse, records,
 * publish, acknowledge) is measured against it.
 *
 * Found as `CDC_PG_RECVLOGICAL`, on `PATH`, or in Debian's `/usr/lib/postgresql/<major>/bin`
 * (newest first); the embedded PostgreSQL package ships no client programs.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createReadStream, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { lsnToBigInt } from '../../local/slot-stream.ts';
import { SLOT_READ_OPTIONS } from '../../local/slot-stream.ts';
import { one } from './pg.ts';

/** Where pg_recvlogical is, or null with the places looked at. */
export function findRecvlogical(): { bin: string } | { bin: null; looked: string } {
  const fromEnv = process.env.CDC_PG_RECVLOGICAL;
  if (fromEnv) return existsSync(fromEnv) ? { bin: fromEnv } : { bin: null, looked: `CDC_PG_RECVLOGICAL=${fromEnv} (no such file)` };
  const which = spawnSync('sh', ['-c', 'command -v pg_recvlogical'], { encoding: 'utf8' });
  if (which.status === 0 && which.stdout.trim()) return { bin: which.stdout.trim() };
  const debian = '/usr/lib/postgresql';
  if (existsSync(debian)) {
    const majors = readdirSync(debian)
      .filter((d) => /^\d+$/.test(d))
      .sort((a, b) => Number(b) - Number(a));
    for (const m of majors) {
      const bin = path.join(debian, m, 'bin', 'pg_recvlogical');
      if (existsSync(bin)) return { bin };
    }
  }
  return { bin: null, looked: `CDC_PG_RECVLOGICAL, PATH, ${debian}/<major>/bin` };
}

/** The capture's session settings as server options at connection (pg_recvlogical runs no SET). */
const CANONICAL_PGOPTIONS = '-c TimeZone=UTC -c DateStyle=ISO,YMD -c IntervalStyle=postgres -c extra_float_digits=1';

export interface RecvlogicalRead {
  /** From the program's start to its exit at the end position: connect, stream, write the text. */
  seconds: number;
  /** Row changes in what it wrote (lines `table …`). */
  changes: number;
  /** Bytes it wrote. */
  bytes: number;
  version: string;
}

/**
 * One read of `slot` by pg_recvlogical up to the WAL flushed now (`--endpos`), text to a file in
 * a temporary folder; the changes are counted afterwards, untimed. The slot moves (pg_recvlogical
 * acknowledges what it wrote), as the capture's does.
 */
export async function recvlogicalRead(bin: string, url: string, slot: string): Promise<RecvlogicalRead> {
  const version = spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout.trim();
  const target = (await one<{ lsn: string }>(url, 'SELECT pg_current_wal_flush_lsn()::text AS lsn')).lsn;
  const dir = mkdtempSync(path.join(tmpdir(), 'cdc-bench-recv-'));
  const out = path.join(dir, 'changes.txt');
  try {
    const args = [
      '-d',
      url,
      '--slot',
      slot,
      '--start',
      '--no-loop',
      '--endpos',
      target,
      '-f',
      out,
      ...SLOT_READ_OPTIONS.flatMap(([k, v]) => ['-o', `${k}=${v}`]),
    ];
    const t0 = performance.now();
    const code = await new Promise<number>((resolve, reject) => {
      const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, PGOPTIONS: CANONICAL_PGOPTIONS } });
      let err = '';
      child.stderr.on('data', (d: Buffer) => void (err += d.toString('utf8')));
      child.on('error', reject);
      child.on('exit', (c) => (c === 0 ? resolve(0) : reject(new Error(`pg_recvlogical exited with ${c}: ${err.trim()}`))));
    });
    const seconds = (performance.now() - t0) / 1000;
    void code;
    let changes = 0;
    let bytes = 0;
    for await (const line of createInterface({ input: createReadStream(out, 'utf8'), crlfDelay: Infinity })) {
      bytes += Buffer.byteLength(line) + 1;
      if (line.startsWith('table ')) changes++;
    }
    if (lsnToBigInt(target) <= 0n) throw new Error(`pg_recvlogical: no end position (${target})`);
    return { seconds, changes, bytes, version };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
