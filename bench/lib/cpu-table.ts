/**
 * CPU per process over a stretch of a benchmark, from /proc (Linux): this process by thread
 * (main thread, libuv pool, V8 helpers), and every descendant of it by what it is (kinesalite,
 * DynamoDB Local, each PostgreSQL backend kind, the load generator). Taken as two snapshots; their
 * difference is each one's core-seconds in the stretch (docs/performance-log.md, "48. Where the
 * end-to-end pipeline's CPU goes, and one kinesalite per stream").
 */
import { readdirSync, readFileSync } from 'node:fs';
import { clockTicks } from './profile.ts';

/** CPU ms per label at one moment. */
export type CpuSnapshot = Map<string, number>;

interface ProcInfo {
  pid: number;
  ppid: number;
  /** utime + stime, and the reaped children's cutime + cstime, in clock ticks. */
  own: number;
  reaped: number;
  comm: string;
}

function msPerTick(): number {
  return 1000 / clockTicks();
}

function readProc(dir: string): ProcInfo | null {
  try {
    const st = readFileSync(`${dir}/stat`, 'utf8');
    const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
    return {
      pid: Number(dir.slice(dir.lastIndexOf('/') + 1)),
      ppid: Number(f[1]),
      own: Number(f[11]) + Number(f[12]),
      reaped: Number(f[13]) + Number(f[14]),
      comm: st.slice(st.indexOf('(') + 1, st.lastIndexOf(')')),
    };
  } catch {
    return null;
  }
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
  } catch {
    return '';
  }
}

/** What a descendant process is, for the table. `named` maps known pids (kinesalite's) to their label. */
function labelOf(p: ProcInfo, named: ReadonlyMap<number, string>): string {
  const known = named.get(p.pid);
  if (known) return known;
  const cmd = cmdline(p.pid);
  if (p.comm === 'java' || /DynamoDBLocal/.test(cmd)) return 'DynamoDB Local (JVM)';
  if (/^postgres: /.test(cmd)) {
    // "postgres: walsender user host ...", "postgres: user db host activity", "postgres: checkpointer"...
    const words = cmd.slice('postgres: '.length).split(' ');
    if (words[0] === 'walsender') return 'PostgreSQL walsender (logical decoding)';
    if (words.length >= 3 && /\(\d+\)$|^\[local\]$/.test(words[2] ?? '')) return `PostgreSQL backend, database ${words[1]}`;
    return `PostgreSQL ${words.slice(0, 2).join(' ')}`;
  }
  if (/postgres/.test(p.comm)) return 'PostgreSQL postmaster';
  if (cmd.includes('workload.ts')) return 'load generator (its process)';
  if (/kinesalite/i.test(cmd) || /CDC_KINESALITE/.test(cmd)) return 'kinesalite';
  return `other: ${p.comm}`;
}

/** This process's threads by kind (its name in /proc/self/task). */
function threadLabel(comm: string): string {
  if (/^node|^tsx|^MainThread/.test(comm)) return 'cdc process: main thread';
  if (/libuv|^node-worker/i.test(comm)) return 'cdc process: libuv pool';
  if (/V8|GC/i.test(comm)) return 'cdc process: V8 helpers (GC, compiler)';
  return `cdc process: thread ${comm}`;
}

/**
 * CPU ms so far of this process's threads and of all its descendants, by label. A postmaster's
 * reaped children (ended backends) count under the postmaster's label.
 */
export function cpuSnapshot(named: ReadonlyMap<number, string> = new Map()): CpuSnapshot {
  const k = msPerTick();
  const out: CpuSnapshot = new Map();
  const add = (label: string, t: number): void => void out.set(label, (out.get(label) ?? 0) + t * k);
  for (const t of readdirSync('/proc/self/task')) {
    const info = readProc(`/proc/self/task/${t}`);
    if (info) add(threadLabel(info.comm), info.own);
  }
  // Children of this process that ended (the load generator, after its load) are reaped into its counters.
  const self = readProc('/proc/self');
  if (self) add('ended child processes (the load generator)', self.reaped);
  const all: ProcInfo[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const info = readProc(`/proc/${d}`);
    if (info) all.push(info);
  }
  const children = new Map<number, ProcInfo[]>();
  for (const p of all) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p]);
  const walk = (pid: number): void => {
    for (const c of children.get(pid) ?? []) {
      const label = labelOf(c, named);
      add(label, c.own);
      if (/^PostgreSQL postmaster/.test(label)) add("PostgreSQL ended backends (the load generator's connection, autovacuum)", c.reaped);
      walk(c.pid);
    }
  };
  walk(process.pid);
  return out;
}

/** One row of the table: core-seconds per 10,000 changes, and the share of a core. */
export interface CpuRow {
  label: string;
  ms: number;
  coreSecondsPer10k: number;
  shareOfCore: number;
}

/** The difference of two snapshots over `changes` changes in `wallMs`, largest first, with a total row. */
export function cpuRows(before: CpuSnapshot, after: CpuSnapshot, changes: number, wallMs: number): CpuRow[] {
  const rows: CpuRow[] = [];
  let total = 0;
  for (const [label, ms1] of after) {
    const ms = ms1 - (before.get(label) ?? 0);
    if (ms <= 0) continue;
    total += ms;
    rows.push({ label, ms, coreSecondsPer10k: (ms / 1000) * (10_000 / Math.max(1, changes)), shareOfCore: ms / wallMs });
  }
  rows.sort((a, b) => b.ms - a.ms);
  rows.push({ label: 'total', ms: total, coreSecondsPer10k: (total / 1000) * (10_000 / Math.max(1, changes)), shareOfCore: total / wallMs });
  return rows;
}

/** The rows as lines of text. */
export function cpuTableText(rows: readonly CpuRow[]): string[] {
  return rows.map(
    (r) =>
      `${r.label.padEnd(48)} ${String(Math.round(r.ms)).padStart(7)} ms  ${r.coreSecondsPer10k.toFixed(2).padStart(6)} core-s/10k  ${(r.shareOfCore * 100).toFixed(0).padStart(4)} % of a core`,
  );
}
