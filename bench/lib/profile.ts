/**
 * Where the time of an apply goes, measured from outside the code under test:
 * - `SqlTimer`: wraps `query` of every client a pg pool hands out and adds the wall time of each
 *   statement (promise or COPY stream) to a phase named by the statement's text;
 * - `timedControlPlane`: a proxy around a ControlPlane that adds the time of each call;
 * - `statementStats`: the server's own time per statement from `pg_stat_statements`;
 * - `cpuProfile`: a V8 CPU profile of a section of this process, summed by function and file.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import path from 'node:path';
import type pg from 'pg';
import type { ControlPlane } from '../../lambda/core/shared/control-plane.ts';

/** Accumulated time and count per label. */
export class Tally {
  readonly ms = new Map<string, number>();
  readonly calls = new Map<string, number>();

  add(label: string, ms: number): void {
    this.ms.set(label, (this.ms.get(label) ?? 0) + ms);
    this.calls.set(label, (this.calls.get(label) ?? 0) + 1);
  }

  total(): number {
    let t = 0;
    for (const v of this.ms.values()) t += v;
    return t;
  }

  reset(): void {
    this.ms.clear();
    this.calls.clear();
  }

  /** Labels with total ms and calls, largest first. */
  entries(): Array<{ label: string; ms: number; calls: number }> {
    return [...this.ms.entries()]
      .map(([label, ms]) => ({ label, ms: Math.round(ms * 10) / 10, calls: this.calls.get(label) ?? 0 }))
      .sort((a, b) => b.ms - a.ms);
  }
}

/** The applier phase a statement belongs to, from its text. */
export function applierPhase(text: string): string {
  const t = text.trimStart();
  if (/^SELECT version\(\)/.test(t)) return 'detect warehouse';
  if (/^SELECT table_name/.test(t)) return 'read sink shape';
  if (/^BEGIN; CREATE SCHEMA|^BEGIN; ALTER TABLE|CREATE TABLE IF NOT EXISTS/.test(t)) return 'DDL';
  if (/^(BEGIN; )?CREATE TEMP TABLE/.test(t)) return 'create stage tables';
  if (/^(INSERT INTO|COPY) "cdc_events_/.test(t)) return 'stage events';
  if (/^(INSERT INTO|COPY) "cdc_writes_/.test(t)) return 'stage writes';
  if (/_changelog/.test(t) && /^(BEGIN; )?INSERT INTO/.test(t)) return 'append changelog + read stored state';
  if (/COMMIT\s*$/.test(t)) return 'apply writes + COMMIT';
  if (/^DROP TABLE "cdc_/.test(t)) return 'drop stage tables';
  if (/^SELECT \d+ AS "_cdc_idx"/.test(t)) return 'read old-key rows';
  if (/^(TRUNCATE|ANALYZE) "cdc_/.test(t)) return 'stage TRUNCATE / ANALYZE (experimental loader)';
  return 'other SQL';
}

type QueryFn = (...args: unknown[]) => unknown;

/** Times every statement of the clients of a pool (patches each client once, on connect). */
export class SqlTimer {
  readonly tally = new Tally();
  enabled = true;

  constructor(
    pool: pg.Pool,
    private readonly phase: (text: string) => string = applierPhase,
  ) {
    pool.on('connect', (client) => this.patch(client));
  }

  private patch(client: pg.ClientBase): void {
    const original = client.query.bind(client) as QueryFn;
    const tally = this.tally;
    const phase = this.phase;
    const enabled = (): boolean => this.enabled;
    const patched: QueryFn = (...args) => {
      const first = args[0] as string | { text?: string } | undefined;
      const text = typeof first === 'string' ? first : (first?.text ?? '');
      const t0 = performance.now();
      const result = original(...args);
      if (!enabled()) return result;
      const label = phase(text);
      if (result && typeof (result as Promise<unknown>).then === 'function') {
        return (result as Promise<unknown>).finally(() => tally.add(label, performance.now() - t0));
      }
      const stream = result as { once?: (ev: string, fn: () => void) => void } | undefined;
      if (stream && typeof stream.once === 'function') {
        let done = false;
        const end = (): void => {
          if (done) return;
          done = true;
          tally.add(label, performance.now() - t0);
        };
        stream.once('finish', end);
        stream.once('error', end);
      }
      return result;
    };
    (client as unknown as { query: QueryFn }).query = patched;
  }
}

/** A ControlPlane whose every call adds its time to `tally` (label = method name). */
export function timedControlPlane(inner: ControlPlane, tally: Tally): ControlPlane {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== 'function') return value;
      return async (...args: unknown[]) => {
        const t0 = performance.now();
        try {
          return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        } finally {
          tally.add(String(prop), performance.now() - t0);
        }
      };
    },
  });
}

/** One statement's server-side totals from pg_stat_statements. */
export interface StatementStat {
  phase: string;
  query: string;
  calls: number;
  rows: number;
  totalMs: number;
}

/** Server-side phase of a normalised statement text (pg_stat_statements keeps one per statement). */
export function serverPhase(q: string): string {
  const t = q.trim();
  if (/^INSERT INTO "cdc_events_/.test(t) || /^COPY "cdc_events_/.test(t)) return 'stage events';
  if (/^INSERT INTO "cdc_writes_/.test(t) || /^COPY "cdc_writes_/.test(t)) return 'stage writes';
  if (/^INSERT INTO \S+_changelog/.test(t)) return 'changelog append (INSERT … NOT EXISTS)';
  if (/^SELECT e\."_cdc_idx"/.test(t)) return 'read stored state (join)';
  if (/^UPDATE \S+_mirror/.test(t)) return 'mirror UPDATE … FROM stage';
  if (/^INSERT INTO \S+_mirror/.test(t)) return 'mirror INSERT … NOT EXISTS';
  if (/^DELETE FROM "cdc_/.test(t)) return 'clear stage tables';
  if (/^COMMIT/i.test(t)) return 'COMMIT';
  if (/^BEGIN/i.test(t)) return 'BEGIN';
  if (/^CREATE TEMP TABLE/.test(t)) return 'create stage tables';
  if (/^DROP TABLE/.test(t)) return 'drop stage tables';
  return 'other';
}

/** Resets pg_stat_statements (the extension must be loaded and created). */
export async function resetStatementStats(client: pg.ClientBase): Promise<void> {
  await client.query('SELECT pg_stat_statements_reset()');
}

/** Reads pg_stat_statements for the current database, grouped into phases (largest first). */
export async function statementStats(
  client: pg.ClientBase,
): Promise<{ phases: Array<{ phase: string; ms: number; calls: number; rows: number }>; statements: StatementStat[] }> {
  const res = await client.query(
    `SELECT query, calls::int AS calls, rows::bigint::text AS rows, total_exec_time AS ms
       FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = current_database() AND query NOT LIKE '%pg_stat_statements%'`,
  );
  const statements: StatementStat[] = (res.rows as Array<{ query: string; calls: number; rows: string; ms: number }>).map((r) => ({
    phase: serverPhase(r.query),
    query: r.query.length > 160 ? `${r.query.slice(0, 160)}…` : r.query,
    calls: r.calls,
    rows: Number(r.rows),
    totalMs: Math.round(r.ms * 10) / 10,
  }));
  const byPhase = new Map<string, { phase: string; ms: number; calls: number; rows: number }>();
  for (const s of statements) {
    const p = byPhase.get(s.phase) ?? { phase: s.phase, ms: 0, calls: 0, rows: 0 };
    p.ms += s.totalMs;
    p.calls += s.calls;
    p.rows += s.rows;
    byPhase.set(s.phase, p);
  }
  const phases = [...byPhase.values()].map((p) => ({ ...p, ms: Math.round(p.ms) })).sort((a, b) => b.ms - a.ms);
  statements.sort((a, b) => b.totalMs - a.totalMs);
  return { phases, statements: statements.slice(0, 25) };
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

/** Self time of a CPU profile by function and by file (ms, largest first). */
export interface ProfileSummary {
  totalMs: number;
  byFile: Array<{ file: string; ms: number; share: number }>;
  byFunction: Array<{ fn: string; ms: number; share: number }>;
}

function shortFile(url: string, root: string): string {
  if (!url) return '(native / V8 internals)';
  let p = url.startsWith('file://') ? decodeURIComponent(url.slice('file://'.length)) : url;
  if (p.startsWith('node:')) return p;
  const nm = p.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const rest = p.slice(nm + 'node_modules/'.length).split('/');
    return `npm:${rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]}`;
  }
  if (p.startsWith(root)) p = path.relative(root, p);
  return p;
}

/** Sums self time of a V8 CPU profile. */
export function summariseProfile(profile: CpuProfile, root: string, top = 15): ProfileSummary {
  const self = new Map<number, number>();
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  for (let i = 0; i < samples.length; i++) self.set(samples[i]!, (self.get(samples[i]!) ?? 0) + (deltas[i] ?? 0) / 1000);
  const byFile = new Map<string, number>();
  const byFn = new Map<string, number>();
  let total = 0;
  for (const n of profile.nodes) {
    const ms = self.get(n.id) ?? 0;
    if (ms === 0) continue;
    total += ms;
    const name = n.callFrame.functionName || '(anonymous)';
    const file = shortFile(n.callFrame.url, root);
    const isIdle = name === '(idle)' || name === '(program)' || name === '(garbage collector)';
    const fileKey = isIdle ? name : file;
    byFile.set(fileKey, (byFile.get(fileKey) ?? 0) + ms);
    const fnKey = isIdle ? name : `${name} (${file}:${n.callFrame.lineNumber + 1})`;
    byFn.set(fnKey, (byFn.get(fnKey) ?? 0) + ms);
  }
  const list = <K extends string>(m: Map<string, number>, key: K) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(
        ([k, ms]) => ({ [key]: k, ms: Math.round(ms), share: Math.round((ms / total) * 1000) / 1000 }) as { [P in K]: string } & { ms: number; share: number },
      );
  return { totalMs: Math.round(total), byFile: list(byFile, 'file'), byFunction: list(byFn, 'fn') };
}

/** Runs `fn` under the V8 CPU profiler of this process and returns its result and the profile summary. */
export async function cpuProfile<T>(root: string, fn: () => Promise<T>): Promise<{ result: T; profile: ProfileSummary }> {
  const session = new Session();
  session.connect();
  try {
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 500 });
    await session.post('Profiler.start');
    const result = await fn();
    const { profile } = (await session.post('Profiler.stop')) as unknown as { profile: CpuProfile };
    return { result, profile: summariseProfile(profile, root) };
  } finally {
    session.disconnect();
  }
}

/** CPU time (user + system) of a process so far, ms, from /proc (Linux); null elsewhere. */
export function processCpuMs(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the command.
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / clockTicks();
  } catch {
    return null;
  }
}

/** Fields of /proc/<pid>/stat after the command name (Linux). */
function statFields(pid: number | string): string[] {
  const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return st.slice(st.lastIndexOf(')') + 2).split(' ');
}

/** The postmaster of the server a pool or client talks to (the parent of one of its backends), from /proc: Linux, the server on this machine. */
export async function postmasterOf(pool: pg.Pool | pg.ClientBase): Promise<number> {
  const backend = (await pool.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]!.p;
  return Number(statFields(backend)[1]);
}

/**
 * The live children of `pid`, from /proc: each of its threads' `children` file (Linux 3.5 and
 * later; one read per thread instead of one per process of the machine). Falls back to every
 * process's parent (`childrenByScan`) when the files cannot be read. The rebuild bench reads its
 * cluster's CPU after every batch of the bulk, on the main thread that bounds the rebuild: the
 * scan, about 100 `stat` files a reading, took 80–130 ms of it per rebuild
 * (docs/performance-log.md, "64. What the replay parses; the rebuild bench's per-step readings (issue 27; 2026-12-07)").
 */
export function childrenOf(pid: number): number[] {
  try {
    const out: number[] = [];
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      for (const c of readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(/\s+/)) if (c !== '') out.push(Number(c));
    }
    return out;
  } catch {
    return childrenByScan(pid);
  }
}

/** The live children of `pid`: every process of /proc whose parent it is. */
export function childrenByScan(pid: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (Number(statFields(d)[1]) === pid) out.push(Number(d));
    } catch {
      // the process ended meanwhile
    }
  }
  return out;
}

/**
 * CPU ms of a PostgreSQL cluster so far: the postmaster, its children that ended (reaped into its
 * own counters: autovacuum workers, ended backends) and its live children. The difference over a
 * stretch is the server's CPU in it, whichever process spent it.
 */
export function clusterCpuMs(postmaster: number): number {
  const f = statFields(postmaster);
  let t = Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
  for (const c of childrenOf(postmaster)) {
    try {
      const g = statFields(c);
      if (Number(g[1]) === postmaster) t += Number(g[11]) + Number(g[12]);
    } catch {
      // the process ended meanwhile
    }
  }
  return (t * 1000) / clockTicks();
}

/**
 * This process's CPU so far by thread, ms, from /proc (Linux; null elsewhere): its main thread's
 * (the JavaScript, GC pauses included) and its other threads' together (V8's helpers, which mark,
 * sweep and scavenge concurrently and compile, and libuv's pool). `process.cpuUsage` counts both.
 */
export function threadCpuMs(): { main: number; others: number } | null {
  try {
    let main = 0;
    let others = 0;
    for (const tid of readdirSync('/proc/self/task')) {
      const f = statFields(`self/task/${tid}`);
      const ms = ((Number(f[11]) + Number(f[12])) * 1000) / clockTicks();
      if (tid === String(process.pid)) main += ms;
      else others += ms;
    }
    return { main, others };
  } catch {
    return null;
  }
}

let ticks: number | null = null;
/** The kernel's clock ticks per second (`getconf CLK_TCK`; 100 when it cannot be read): /proc's CPU times are in these. */
export function clockTicks(): number {
  if (ticks === null) {
    try {
      ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticks = 100;
    }
  }
  return ticks;
}
