/** The search stand-in's state file (`dataFile`): every index and alias, loaded at start and rewritten atomically after every change. */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import type { AliasSpec, Index, Obj } from './model.ts';

interface SavedState {
  version: 1;
  indices: Array<{
    name: string;
    uuid: string;
    gcDeletesMs: number;
    settings: Obj;
    mappings: Index['mappings'];
    seqNo: number;
    docs: Array<[string, Obj, string, number]>;
    tombstones: Array<[string, string, number]>;
  }>;
  aliases: Array<[string, Array<[string, AliasSpec]>]>;
  uuidSeq: number;
}

type IndexHead = Pick<Index, 'name' | 'uuid' | 'gcDeletesMs' | 'settings' | 'mappings' | 'seqNo'>;

/** What an index is saved with as it is, in the saved order: all but its documents and tombstones. */
function headOf(i: IndexHead): IndexHead {
  return { name: i.name, uuid: i.uuid, gcDeletesMs: i.gcDeletesMs, settings: i.settings, mappings: i.mappings, seqNo: i.seqNo };
}

/** Loads `file` into the maps; returns the saved uuid sequence. */
export function loadState(file: string, indices: Map<string, Index>, aliases: Map<string, Map<string, AliasSpec>>): number {
  let saved: SavedState;
  try {
    saved = JSON.parse(readFileSync(file, 'utf8')) as SavedState;
  } catch (e) {
    throw new Error(`search stand-in state ${file} is not readable JSON (${(e as Error).message}); remove it to start with an empty index`);
  }
  if (saved.version !== 1) throw new Error(`search stand-in state ${file} has an unknown version; remove it to start with an empty index`);
  for (const i of saved.indices) {
    indices.set(i.name, {
      ...headOf(i),
      docs: new Map(i.docs.map(([id, source, version, seqNo]) => [id, { source, version: BigInt(version), seqNo }])),
      tombstones: new Map(i.tombstones.map(([id, version, at]) => [id, { version: BigInt(version), at }])),
    });
  }
  for (const [alias, entries] of saved.aliases) aliases.set(alias, new Map(entries));
  return saved.uuidSeq;
}

/** Writes the maps to `file` (a temporary file renamed over it). */
export function saveState(
  file: string,
  indices: ReadonlyMap<string, Index>,
  aliases: ReadonlyMap<string, ReadonlyMap<string, AliasSpec>>,
  uuidSeq: number,
): void {
  const state: SavedState = {
    version: 1,
    indices: [...indices.values()].map((i) => ({
      ...headOf(i),
      docs: [...i.docs].map(([id, d]) => [id, d.source, d.version.toString(), d.seqNo] as [string, Obj, string, number]),
      tombstones: [...i.tombstones].map(([id, t]) => [id, t.version.toString(), t.at] as [string, string, number]),
    })),
    aliases: [...aliases].map(([a, m]) => [a, [...m]]),
    uuidSeq,
  };
  writeFileSync(`${file}.tmp`, JSON.stringify(state));
  renameSync(`${file}.tmp`, file);
}
