/**
 * A STAND-IN for OpenSearch, NOT OpenSearch: a small HTTP server on 127.0.0.1 that speaks the
 * subset of the OpenSearch REST API the search sink uses, so `cdc local` and the tests can run
 * the real search applier on one machine (no OpenSearch server can be installed here). See
 * docs/search.md, "The local stand-in", for what it does and does not do. It is tested on its own
 * for the semantics below (test/local/search-standin.test.ts).
 *
 * API subset: `GET /` (info); index `PUT`/`DELETE`/`HEAD /<index>` with `settings`, `mappings`
 * and `aliases` (alias `filter`, `is_write_index`); `GET`/`PUT /<index>/_mapping`;
 * `GET /_alias/<name>`, `POST /_aliases` (add / remove, one atomic list); `POST /_bulk` and
 * `POST /<index>/_bulk` with `index`, `create` and `delete` actions and per-item results;
 * `GET /<index>/_doc/<id>`; `POST /<index>/_mget` (`ids` or `docs`); `POST /<index>/_search`
 * with `match_all`, `term`, `terms`, `range` (`gt`/`gte`/`lt`/`lte`), `bool`
 * (`filter`/`must`/`must_not`/`should`, `minimum_should_match`), `size`, `from`, `sort` on one or
 * more fields and `search_after` (one value per sort field); `POST /<index>/_count`;
 * `POST /<index>/_refresh`.
 * Field values compare by the field's mapped type, as OpenSearch's do: `long`/`integer`/`short`/
 * `byte` as exact integers, `double`/`float` as numbers, `date` by time, `boolean` false before
 * true, `keyword` by the bytes of its UTF-8 text (Lucene's term order), a `text` field's `keyword`
 * sub-field (`name.keyword`) by the text, except a value longer than its `ignore_above`, which is
 * not indexed (a range never matches it, a sort sees it missing). Sorting on a `text` field is
 * refused (OpenSearch needs fielddata for that). A document missing a sort field sorts last
 * (`missing: _last`, the default), in either order; a multi-valued field sorts by its smallest
 * value ascending and its largest descending.
 * Searches through an alias apply its filter; `get` and `mget` do not (as in OpenSearch).
 * Every write is visible at once (as if every request refreshed).
 *
 * Version semantics, as OpenSearch documents them (index and bulk APIs, `index.gc_deletes`):
 * - internal versioning: a write sets version = current + 1 (1 for a new document);
 * - `version_type: external`: the write happens only if the given version is GREATER than the
 *   current one; `external_gte`: greater or equal; otherwise the item fails with 409
 *   `version_conflict_engine_exception` and nothing changes. Versions are 0 … 2^63 − 1 and are
 *   kept exactly (`bigint`);
 * - a delete keeps a tombstone with the document's version for `index.gc_deletes` (default 60 s,
 *   per index, configurable); while it is kept, a write with a lower version conflicts. After
 *   the horizon the tombstone is forgotten and an older write RESURRECTS the document, exactly
 *   the hazard the search sink's design guards against. A delete of an absent document answers
 *   404 `not_found` and still records its versioned tombstone;
 * - `create` fails with 409 when the document exists.
 * Mappings: `dynamic: strict` refuses unknown fields (400 `strict_dynamic_mapping_exception`);
 * values are checked against `long`, `double`, `boolean`, `date` (`strict_date`) fields
 * (400 `mapper_parsing_exception`), except where the field's mapping says `ignore_malformed`
 * (the document is kept, the value is in `_source` and not indexed); a mapping update may add fields but not change a field's
 * type (400 `illegal_argument_exception`).
 *
 * For tests, `inject` makes the next requests or bulk items fail with a status (429 throttling,
 * 503 unavailable) without applying them, and the clock is injectable (`now`).
 */
import { existsSync } from 'node:fs';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { checkObject, matches, typeOf } from './search-standin/fields.ts';
import {
  errorAnswer,
  HttpError,
  isObj,
  parseActionLine,
  parseTimeValue,
  stringifyExact,
  type AliasSpec,
  type Doc,
  type Index,
  type Json,
  type Obj,
} from './search-standin/model.ts';
import { bulkActions, currentVersion } from './search-standin/bulk.ts';
import { mayWrite, SortedPages } from './search-standin/search.ts';
import { loadState, saveState } from './search-standin/state-file.ts';

export interface SearchStandInOptions {
  /** Port on 127.0.0.1. @default 0 (any free port) */
  port?: number;
  /** `index.gc_deletes` of indexes that do not set it, in ms. @default 60000 (OpenSearch's default) */
  defaultGcDeletesMs?: number;
  /** Clock (epoch ms) for tombstone horizons. @default Date.now */
  now?: () => number;
  /**
   * Keep the state in this file: loaded at start, rewritten (atomically) before answering every
   * request that changed something, so that a resumed `cdc local` finds the index its checkpoints
   * describe. @default in memory only
   */
  dataFile?: string;
}

export interface Injection {
  /** `request`: whole requests fail with `status`; `item`: bulk items fail with `status`. */
  scope: 'request' | 'item';
  status: number;
  /** How many requests or items. */
  times: number;
  /** `item` only: fail only items with this document id. @default every item */
  id?: string;
}

const MAX_VERSION = (1n << 63n) - 1n;

export class SearchStandIn {
  private readonly indices = new Map<string, Index>();
  /** alias → index → spec. */
  private readonly aliases = new Map<string, Map<string, AliasSpec>>();
  private readonly injections: Injection[] = [];
  private server: http.Server | null = null;
  private uuidSeq = 0;
  readonly defaultGcDeletesMs: number;
  now: () => number;
  /** Requests served, by "METHOD /path-kind", for tests and the benchmark. */
  readonly stats = { requests: 0, bulkItems: 0 };
  /** The last query's sorted hits, kept for its next page until a request may write. */
  readonly pages = new SortedPages();

  constructor(private readonly options: SearchStandInOptions = {}) {
    this.defaultGcDeletesMs = options.defaultGcDeletesMs ?? 60_000;
    this.now = options.now ?? Date.now;
  }

  /** Starts listening on 127.0.0.1 (after loading `dataFile`); returns the base URL. */
  async start(): Promise<string> {
    if (this.options.dataFile && existsSync(this.options.dataFile)) this.load(this.options.dataFile);
    const server = http.createServer((req, res) => void this.handle(req, res));
    server.keepAliveTimeout = 60_000;
    server.listen(this.options.port ?? 0, '127.0.0.1');
    await once(server, 'listening');
    this.server = server;
    return this.url;
  }

  get url(): string {
    if (!this.server) throw new Error('the search stand-in is not started');
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = null;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }

  private load(file: string): void {
    this.uuidSeq = loadState(file, this.indices, this.aliases);
  }

  private save(file: string): void {
    saveState(file, this.indices, this.aliases, this.uuidSeq);
  }

  /** Makes the next requests or bulk items fail (see `Injection`). */
  inject(injection: Injection): void {
    this.injections.push({ ...injection });
  }

  /** Forgets injections not used up yet. */
  clearInjections(): void {
    this.injections.length = 0;
  }

  private takeInjection(scope: Injection['scope'], id: string | null = null): number | null {
    const i = this.injections.find((x) => x.scope === scope && x.times > 0 && (x.id === undefined || x.id === id));
    if (!i) return null;
    i.times--;
    return i.status;
  }

  // -------------------------------------------------------------------------------------------

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    this.stats.requests++;
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    let status = 200;
    let out: Json = {};
    try {
      const injected = this.takeInjection('request');
      if (injected !== null) {
        throw new HttpError(injected, injected === 429 ? 'es_rejected_execution_exception' : 'unavailable_shards_exception', `injected failure ${injected}`);
      }
      if (mayWrite(req.method ?? 'GET', url.pathname)) this.pages.written();
      [status, out] = this.route(req.method ?? 'GET', url, body);
      const method = req.method ?? 'GET';
      const changes = method === 'PUT' || method === 'DELETE' || (method === 'POST' && /\/(_bulk|_aliases|_mapping)$/.test(url.pathname));
      if (changes && this.options.dataFile) this.save(this.options.dataFile);
    } catch (err) {
      [status, out] = errorAnswer(err);
    }
    const text = req.method === 'HEAD' ? '' : stringifyExact(out);
    res.writeHead(status, { 'content-type': 'application/json; charset=UTF-8', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  }

  private parseBody(body: string): Obj {
    if (body.trim() === '') return {};
    try {
      const v = parseActionLine(body);
      if (!isObj(v)) throw new Error('not an object');
      return v;
    } catch (e) {
      throw new HttpError(400, 'parse_exception', `request body is not a JSON object: ${(e as Error).message}`);
    }
  }

  private route(method: string, url: URL, body: string): [number, Json] {
    const parts = url.pathname
      .split('/')
      .filter((p) => p !== '')
      .map(decodeURIComponent);
    if (parts.length === 0) {
      return [
        200,
        {
          name: 'search-standin',
          cluster_name: 'cdc-local',
          version: { distribution: 'cdc-local-standin', number: '2.19.0' },
          tagline: 'A stand-in, not OpenSearch',
        },
      ];
    }
    const [a, b, c] = parts;
    if (a === '_bulk') return this.bulk(null, body);
    if (a === '_aliases' && method === 'POST') return this.updateAliases(this.parseBody(body));
    if (a === '_alias' && b !== undefined) return this.getAlias(b);
    if (b === undefined) {
      if (method === 'HEAD') return [this.resolve(a!, false).length > 0 ? 200 : 404, {}];
      if (method === 'PUT') return this.createIndex(a!, this.parseBody(body));
      if (method === 'DELETE') return this.deleteIndex(a!);
      if (method === 'GET') return this.getIndex(a!);
    }
    switch (b) {
      case '_bulk':
        return this.bulk(a!, body);
      case '_mapping':
        if (method === 'GET') return this.getMapping(a!);
        if (method === 'PUT' || method === 'POST') return this.putMapping(a!, this.parseBody(body));
        break;
      case '_alias':
        if (method === 'GET') return this.getIndexAliases(a!);
        break;
      case '_doc':
        if (c !== undefined && method === 'GET') return this.getDoc(a!, c);
        break;
      case '_mget':
        return this.mget(a!, this.parseBody(body));
      case '_search': {
        const query = this.parseBody(body);
        return this.pages.page(a!, query, () => this.hits(a!, query));
      }
      case '_count':
        return this.count(a!, this.parseBody(body));
      case '_refresh':
        this.resolve(a!, true);
        return [200, { _shards: { total: 1, successful: 1, failed: 0 } }];
    }
    throw new HttpError(400, 'illegal_argument_exception', `the search stand-in does not implement ${method} ${url.pathname}`);
  }

  /** Concrete indexes for a name (an index or an alias). */
  private resolve(name: string, required: boolean): Index[] {
    const direct = this.indices.get(name);
    if (direct) return [direct];
    const alias = this.aliases.get(name);
    if (alias && alias.size > 0) return [...alias.keys()].map((n) => this.indices.get(n)!).filter(Boolean);
    if (required) throw new HttpError(404, 'index_not_found_exception', `no such index [${name}]`, name);
    return [];
  }

  /** The index a write to `name` goes to (an index, or an alias's write index). */
  private writeIndex(name: string): Index {
    const direct = this.indices.get(name);
    if (direct) return direct;
    const alias = this.aliases.get(name);
    if (!alias || alias.size === 0) throw new HttpError(404, 'index_not_found_exception', `no such index [${name}]`, name);
    const entries = [...alias.entries()];
    const write = entries.length === 1 && entries[0]![1].isWriteIndex !== false ? entries[0] : entries.find(([, s]) => s.isWriteIndex === true);
    if (!write) throw new HttpError(400, 'illegal_argument_exception', `no write index is defined for alias [${name}]`, name);
    return this.indices.get(write[0])!;
  }

  /** The filter searches through `name` apply (an alias's filter), per concrete index. */
  private filterOf(name: string, index: string): Json | undefined {
    return this.aliases.get(name)?.get(index)?.filter;
  }

  private createIndex(name: string, body: Obj): [number, Json] {
    if (!/^[a-z0-9][a-z0-9._-]*$/.test(name) || name.length > 255)
      throw new HttpError(400, 'invalid_index_name_exception', `Invalid index name [${name}]`, name);
    if (this.indices.has(name) || this.aliases.has(name)) throw new HttpError(400, 'resource_already_exists_exception', `index [${name}] already exists`, name);
    const settings = isObj(body.settings) ? body.settings : {};
    const indexSettings = isObj(settings.index) ? settings.index : settings;
    const gc = indexSettings.gc_deletes ?? (settings as Obj)['index.gc_deletes'];
    const mappings = isObj(body.mappings) ? body.mappings : {};
    const index: Index = {
      name,
      uuid: `standin-${++this.uuidSeq}`,
      gcDeletesMs: gc === undefined ? this.defaultGcDeletesMs : parseTimeValue(gc, 'index.gc_deletes'),
      settings: indexSettings,
      mappings: {
        dynamic: typeof mappings.dynamic === 'string' ? mappings.dynamic : String(mappings.dynamic ?? 'true'),
        _meta: mappings._meta ?? undefined,
        properties: isObj(mappings.properties) ? mappings.properties : {},
      },
      docs: new Map(),
      tombstones: new Map(),
      seqNo: 0,
    };
    const aliases = isObj(body.aliases) ? body.aliases : {};
    for (const a of Object.keys(aliases))
      if (this.indices.has(a)) throw new HttpError(400, 'invalid_alias_name_exception', `an index exists with the same name as the alias [${a}]`);
    this.indices.set(name, index);
    for (const [a, spec] of Object.entries(aliases)) this.addAlias(name, a, isObj(spec) ? spec : {});
    return [200, { acknowledged: true, shards_acknowledged: true, index: name }];
  }

  private addAlias(index: string, alias: string, spec: Obj): void {
    let m = this.aliases.get(alias);
    if (!m) this.aliases.set(alias, (m = new Map()));
    m.set(index, {
      ...(isObj(spec.filter) ? { filter: spec.filter } : {}),
      ...(typeof spec.is_write_index === 'boolean' ? { isWriteIndex: spec.is_write_index } : {}),
    });
  }

  private deleteIndex(name: string): [number, Json] {
    const idx = this.indices.get(name);
    if (!idx) throw new HttpError(404, 'index_not_found_exception', `no such index [${name}]`, name);
    this.indices.delete(name);
    for (const [a, m] of this.aliases) {
      m.delete(name);
      if (m.size === 0) this.aliases.delete(a);
    }
    return [200, { acknowledged: true }];
  }

  private aliasesOf(index: string): Obj {
    const out: Obj = {};
    for (const [a, m] of this.aliases) {
      const s = m.get(index);
      if (s) out[a] = { ...(s.filter ? { filter: s.filter } : {}), ...(s.isWriteIndex !== undefined ? { is_write_index: s.isWriteIndex } : {}) };
    }
    return out;
  }

  private mappingJson(i: Index): Obj {
    return { dynamic: i.mappings.dynamic, ...(i.mappings._meta !== undefined ? { _meta: i.mappings._meta } : {}), properties: i.mappings.properties };
  }

  private getIndex(name: string): [number, Json] {
    const out: Obj = {};
    for (const i of this.resolve(name, true))
      out[i.name] = {
        aliases: this.aliasesOf(i.name),
        mappings: this.mappingJson(i),
        settings: { index: { ...i.settings, gc_deletes: `${i.gcDeletesMs}ms`, uuid: i.uuid } },
      };
    return [200, out];
  }

  private getMapping(name: string): [number, Json] {
    const out: Obj = {};
    for (const i of this.resolve(name, true)) out[i.name] = { mappings: this.mappingJson(i) };
    return [200, out];
  }

  private putMapping(name: string, body: Obj): [number, Json] {
    const targets = this.resolve(name, true);
    const props = isObj(body.properties) ? body.properties : {};
    for (const i of targets) {
      for (const [f, m] of Object.entries(props)) {
        const have = i.mappings.properties[f];
        if (have !== undefined && typeOf(have) !== typeOf(m)) {
          throw new HttpError(400, 'illegal_argument_exception', `mapper [${f}] cannot be changed from type [${typeOf(have)}] to [${typeOf(m)}]`, i.name);
        }
      }
    }
    for (const i of targets) {
      for (const [f, m] of Object.entries(props)) if (i.mappings.properties[f] === undefined) i.mappings.properties[f] = m;
      if (body._meta !== undefined) i.mappings._meta = body._meta;
      if (typeof body.dynamic === 'string') i.mappings.dynamic = body.dynamic;
    }
    return [200, { acknowledged: true }];
  }

  private getAlias(name: string): [number, Json] {
    const m = this.aliases.get(name);
    if (!m || m.size === 0) throw new HttpError(404, 'aliases_not_found_exception', `alias [${name}] missing`);
    const out: Obj = {};
    for (const idx of m.keys()) out[idx] = { aliases: { [name]: this.aliasesOf(idx)[name]! } };
    return [200, out];
  }

  private getIndexAliases(name: string): [number, Json] {
    const out: Obj = {};
    for (const i of this.resolve(name, true)) out[i.name] = { aliases: this.aliasesOf(i.name) };
    return [200, out];
  }

  private updateAliases(body: Obj): [number, Json] {
    const actions = Array.isArray(body.actions) ? body.actions : null;
    if (!actions) throw new HttpError(400, 'action_request_validation_exception', 'Validation Failed: 1: no actions specified;');
    // Validate everything first: the list applies atomically.
    const steps: Array<() => void> = [];
    for (const a of actions) {
      if (!isObj(a)) throw new HttpError(400, 'parsing_exception', 'alias action must be an object');
      const [kind, spec] = Object.entries(a)[0]!;
      if (!isObj(spec) || typeof spec.index !== 'string') throw new HttpError(400, 'parsing_exception', `[${kind}] needs an index`);
      const index = spec.index;
      if (!this.indices.has(index)) throw new HttpError(404, 'index_not_found_exception', `no such index [${index}]`, index);
      if (kind === 'add') {
        if (typeof spec.alias !== 'string') throw new HttpError(400, 'parsing_exception', '[add] needs an alias');
        const alias = spec.alias;
        steps.push(() => this.addAlias(index, alias, spec));
      } else if (kind === 'remove') {
        if (typeof spec.alias !== 'string') throw new HttpError(400, 'parsing_exception', '[remove] needs an alias');
        const alias = spec.alias;
        if (!this.aliases.get(alias)?.has(index)) throw new HttpError(404, 'aliases_not_found_exception', `aliases [${alias}] missing`);
        steps.push(() => {
          const m = this.aliases.get(alias)!;
          m.delete(index);
          if (m.size === 0) this.aliases.delete(alias);
        });
      } else if (kind === 'remove_index') {
        steps.push(() => this.deleteIndex(index));
      } else {
        throw new HttpError(400, 'parsing_exception', `unknown alias action [${kind}]`);
      }
    }
    for (const s of steps) s();
    return [200, { acknowledged: true }];
  }

  private bulk(pathIndex: string | null, body: string): [number, Json] {
    const t0 = Date.now();
    const items: Json[] = [];
    let errors = false;
    for (const { kind, meta, source } of bulkActions(body)) {
      this.stats.bulkItems++;
      const r = this.bulkItem(kind, meta, source, pathIndex);
      if ('error' in (r[kind] as Obj)) errors = true;
      items.push(r);
    }
    return [200, { took: Date.now() - t0, errors, items }];
  }

  private bulkItem(kind: 'index' | 'create' | 'delete', meta: Obj, source: Obj | null, pathIndex: string | null): Obj {
    const target = typeof meta._index === 'string' ? meta._index : pathIndex;
    const id = typeof meta._id === 'string' ? meta._id : null;
    const fail = (status: number, type: string, reason: string, index?: string): Obj => ({
      [kind]: {
        _index: index ?? target,
        _id: id,
        status,
        error: { type, reason, index: index ?? target, shard: '0', index_uuid: (index ? this.indices.get(index)?.uuid : null) ?? null },
      },
    });
    const injected = this.takeInjection('item', id);
    if (injected !== null)
      return fail(injected, injected === 429 ? 'es_rejected_execution_exception' : 'unavailable_shards_exception', `injected failure ${injected}`);
    if (!target) return fail(400, 'action_request_validation_exception', 'Validation Failed: 1: index is missing;');
    if (id === null) {
      if (kind !== 'index') return fail(400, 'action_request_validation_exception', 'Validation Failed: 1: id is missing;');
    } else if (Buffer.byteLength(id, 'utf8') > 512) {
      return fail(400, 'action_request_validation_exception', `Validation Failed: 1: id [${id.slice(0, 20)}...] is too long, must be no longer than 512 bytes`);
    }
    let index: Index;
    try {
      index = this.writeIndex(target);
    } catch (e) {
      const h = e as HttpError;
      return fail(h.status, h.type, h.message);
    }
    const versionType = typeof meta.version_type === 'string' ? meta.version_type : 'internal';
    const given = meta.version;
    if (versionType !== 'internal' && versionType !== 'external' && versionType !== 'external_gte') {
      return fail(400, 'illegal_argument_exception', `No version type match [${versionType}]`);
    }
    if (versionType !== 'internal') {
      if (typeof given !== 'bigint')
        return fail(400, 'action_request_validation_exception', `Validation Failed: 1: an external version is required for version_type [${versionType}];`);
      if (given < 0n || given > MAX_VERSION)
        return fail(400, 'action_request_validation_exception', `Validation Failed: 1: illegal version value [${given}] for version type [${versionType}];`);
    }
    const docId = id ?? `auto-${index.uuid}-${index.seqNo + 1}`;
    const current = currentVersion(index, docId, this.now);
    const conflict = (): Obj =>
      fail(
        409,
        'version_conflict_engine_exception',
        `[${docId}]: version conflict, current version [${current!.version}] is higher or equal to the one provided [${String(given)}]`,
        index.name,
      );
    if (kind === 'create' && current?.live) {
      return fail(
        409,
        'version_conflict_engine_exception',
        `[${docId}]: version conflict, document already exists (current version [${current.version}])`,
        index.name,
      );
    }
    let version: bigint;
    if (versionType === 'internal') {
      version = (current?.version ?? 0n) + 1n;
    } else {
      const g = given as bigint;
      if (current && (versionType === 'external' ? g <= current.version : g < current.version)) return conflict();
      version = g;
    }
    const ok = (status: number, result: string): Obj => ({
      [kind]: {
        _index: index.name,
        _id: docId,
        _version: version,
        result,
        _shards: { total: 1, successful: 1, failed: 0 },
        _seq_no: index.seqNo,
        _primary_term: 1,
        status,
      },
    });
    if (kind === 'delete') {
      const existed = index.docs.delete(docId);
      index.tombstones.set(docId, { version, at: this.now() });
      index.seqNo++;
      return existed ? ok(200, 'deleted') : ok(404, 'not_found');
    }
    try {
      checkObject('', index.mappings.properties, source!, index.name, index.mappings.dynamic);
    } catch (e) {
      const h = e as HttpError;
      return fail(h.status, h.type, h.message, index.name);
    }
    if (index.mappings.dynamic !== 'strict' && index.mappings.dynamic !== 'false') {
      for (const [k, v] of Object.entries(source!)) {
        if (index.mappings.properties[k] === undefined && v !== null)
          index.mappings.properties[k] = {
            type: typeof v === 'number' ? (Number.isInteger(v) ? 'long' : 'float') : typeof v === 'boolean' ? 'boolean' : isObj(v) ? 'object' : 'text',
          };
      }
    }
    const created = !current?.live;
    index.seqNo++;
    index.docs.set(docId, { source: source!, version, seqNo: index.seqNo });
    index.tombstones.delete(docId);
    return ok(created ? 201 : 200, created ? 'created' : 'updated');
  }

  private docJson(i: Index, id: string, d: Doc | undefined): Obj {
    if (!d) return { _index: i.name, _id: id, found: false };
    return { _index: i.name, _id: id, _version: d.version, _seq_no: d.seqNo, _primary_term: 1, found: true, _source: d.source };
  }

  private getDoc(name: string, id: string): [number, Json] {
    const targets = this.resolve(name, true);
    if (targets.length > 1)
      throw new HttpError(400, 'illegal_argument_exception', `alias [${name}] has more than one index associated with it, can't execute a single index op`);
    const d = targets[0]!.docs.get(id);
    return [d ? 200 : 404, this.docJson(targets[0]!, id, d)];
  }

  private mget(name: string, body: Obj): [number, Json] {
    const targets = this.resolve(name, true);
    if (targets.length > 1)
      throw new HttpError(400, 'illegal_argument_exception', `alias [${name}] has more than one index associated with it, can't execute a single index op`);
    const i = targets[0]!;
    const ids = Array.isArray(body.ids) ? body.ids : Array.isArray(body.docs) ? body.docs.map((d) => (isObj(d) ? d._id : null)) : null;
    if (!ids) throw new HttpError(400, 'action_request_validation_exception', 'Validation Failed: 1: no documents to get;');
    return [200, { docs: ids.map((id) => this.docJson(i, String(id), i.docs.get(String(id)))) }];
  }

  private hits(name: string, body: Obj): Array<{ index: Index; id: string; doc: Doc }> {
    const out: Array<{ index: Index; id: string; doc: Doc }> = [];
    for (const i of this.resolve(name, true)) {
      const filter = this.filterOf(name, i.name);
      for (const [id, doc] of i.docs)
        if (matches(filter, doc.source, i.mappings.properties) && matches(body.query, doc.source, i.mappings.properties)) out.push({ index: i, id, doc });
    }
    return out;
  }

  private count(name: string, body: Obj): [number, Json] {
    return [200, { count: this.hits(name, body).length, _shards: { total: 1, successful: 1, failed: 0 } }];
  }
}

/**
 * Run on its own (`tsx local/search-standin.ts [--port N] [--gc-deletes-ms N]`): prints
 * `listening <url>` and serves until stopped (the benchmark runs it in its own process).
 */
if (process.argv[1] !== undefined && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  const arg = (name: string): string | undefined => {
    const i = process.argv.indexOf(`--${name}`);
    return i >= 0 ? process.argv[i + 1] : undefined;
  };
  const s = new SearchStandIn({ port: Number(arg('port') ?? 0), defaultGcDeletesMs: Number(arg('gc-deletes-ms') ?? 60_000) });
  void s.start().then((url) => process.stdout.write(`listening ${url}\n`));
  const stop = (): void => void s.stop().then(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
