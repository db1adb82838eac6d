/**
 * New tables join by themselves in `cdc local` (docs/onboarding.md): the catalog scan of
 * lambda/core/tables/discovery.ts, every `everyMs`, over one connection to the source. A table a rule
 * matches and that is eligible is added to the slot capture's table index (so its changes are
 * published from the next peek on) before its snapshot is requested (stream first); a dropped
 * table is taken out of the index. The first scan runs before the capture starts, so a table
 * that joined in an earlier run is captured from the first peek after a restart.
 */
import { listSourceTables, readTableFact } from '../lambda/adapters/source-facts-pg.ts';
import type { ControlPlane } from '../lambda/core/shared/control-plane.ts';
import { scanTables, type DiscoveryRecord } from '../lambda/core/tables/discovery.ts';
import type { TableConfigIndex, TableRule } from '../lambda/core/tables/table-config.ts';
import type { SinkProfile } from '../lambda/core/tables/sink-profile.ts';
import { SourceWatch } from './periodic.ts';

export interface LocalDiscoveryOptions {
  source: string;
  sourceUrl: string;
  controlPlane: ControlPlane;
  rules: readonly TableRule[];
  /** Declared tables and the heartbeat table: their own settings win, they are never discovered. */
  declared: ReadonlySet<string>;
  /** The capture's table index (shared with the snapshot worker). */
  index: TableConfigIndex;
  /** What the sinks the discovered tables join can hold. @default UNKNOWN_SINKS */
  sinks?: SinkProfile;
  /** @default 2000 */
  everyMs?: number;
  onError?: (err: unknown) => void;
}

export class LocalDiscovery {
  /** The verdict of every table the rules matched, as of the last scan. */
  verdicts: DiscoveryRecord[] = [];
  /** When the last scan finished (epoch ms), 0 before the first. */
  lastScanAt = 0;
  private known: Map<string, DiscoveryRecord> | null = null;
  private user = '';
  private readonly watch: SourceWatch;

  constructor(private readonly o: LocalDiscoveryOptions) {
    this.watch = new SourceWatch({
      url: o.sourceUrl,
      applicationName: `cdc-local-discovery-${o.source}`,
      onError: o.onError,
      opened: async (c) => {
        this.user = String((await c.query('SELECT current_user AS u')).rows[0].u);
      },
    });
  }

  /** One scan; throws what the source or the control plane throw. */
  async scan(): Promise<void> {
    const client = await this.watch.client();
    const { known } = await scanTables(
      {
        controlPlane: this.o.controlPlane,
        source: this.o.source,
        rules: this.o.rules,
        declared: this.o.declared,
        listTables: () => listSourceTables(client),
        tableFact: (t, k) => readTableFact(client, t, k),
        user: this.user,
        ...(this.o.sinks ? { sinks: this.o.sinks } : {}),
        capture: (config) => this.o.index.add(config),
        release: (table) => this.o.index.remove(table),
      },
      this.known,
    );
    this.known = known;
    this.verdicts = [...known.values()].filter((r) => !this.o.declared.has(r.table)).sort((a, b) => a.table.localeCompare(b.table));
    this.lastScanAt = Date.now();
  }

  /** Scans every `everyMs` until stopped (errors go to `onError`; the next scan tries again). */
  start(): void {
    this.watch.start(this.o.everyMs ?? 2000, () => this.scan());
  }

  async stop(): Promise<void> {
    await this.watch.stop();
  }
}
