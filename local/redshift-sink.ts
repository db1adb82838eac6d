/**
 * `cdc local --warehouse-engine redshift`: the warehouse sink written the Redshift way, through the
 * Redshift stand-in (docs/local.md, "The Redshift stand-in"; docs/warehouse-apply.md, "Redshift:
 * the applier"). One `RedshiftLoader` on one session of the warehouse PostgreSQL (the stand-in
 * runs the Redshift dialect on it), its staged objects in the state folder's S3 stand-in (the
 * archive folder, under `staging/`), one `RedshiftWarehouse` that every shard's applier shares,
 * and the loader's cadence from the sink's freshness target.
 */
import pg from 'pg';
import type { Archive } from '../lambda/core/rebuild/archive.ts';
import { RedshiftLoader } from '../lambda/adapters/redshift-loader.ts';
import { RedshiftWarehouse } from '../lambda/adapters/warehouse-redshift.ts';
import { redshiftCadence } from '../lambda/core/warehouse/redshift-load.ts';
import { RedshiftStandIn } from './redshift-standin.ts';

/** The warehouse engines `cdc local` writes. */
export const WAREHOUSE_ENGINES = ['postgres', 'redshift'] as const;
export type WarehouseEngine = (typeof WAREHOUSE_ENGINES)[number];

/** The bucket name the staged objects' URIs carry locally (the archive folder stands in for it). */
export const LOCAL_STAGING_BUCKET = 'cdc-local-staging';
/** The role a local COPY names (the stand-in checks its form, nothing grants it). */
export const LOCAL_COPY_ROLE = 'arn:aws:iam::000000000000:role/cdc-local-copy';
/** Locally the freshness target is 3 s: a load every second (the cadence's shortest). */
export const LOCAL_FRESHNESS_TARGET_MS = 3_000;

export interface LocalRedshiftSink {
  warehouse: RedshiftWarehouse;
  loader: RedshiftLoader;
  /** Loads what is queued, ends the cadence and the session. */
  stop(): Promise<void>;
}

/** Opens the loader's one session and starts its cadence (loads only: merges run in the pipeline's merge loop, by the sink's thresholds). */
export async function startLocalRedshiftSink(o: {
  warehouseUrl: string;
  store: Archive;
  sinkId: string;
  freshnessTargetMs?: number;
  onError: (where: string, err: unknown) => void;
}): Promise<LocalRedshiftSink> {
  const client = new pg.Client({ connectionString: o.warehouseUrl, application_name: `cdc-local-${o.sinkId}-redshift-loader` });
  client.on('error', (e) => o.onError('redshift loader session', e));
  await client.connect();
  await client.query("SET TIME ZONE 'UTC'");
  const loader = new RedshiftLoader({
    session: new RedshiftStandIn({ client, store: o.store, bucket: LOCAL_STAGING_BUCKET }),
    store: o.store,
    bucket: LOCAL_STAGING_BUCKET,
    prefix: `staging/${o.sinkId}/`,
    roleArn: LOCAL_COPY_ROLE,
    ledgerSchema: `${o.sinkId}_loads`,
    // A held key change dropped as incomplete (docs/primary-key-changes.md, "On Redshift") is said where errors are.
    log: (message, detail) => o.onError('redshift loader', new Error(`${message}: ${JSON.stringify(detail)}`)),
  });
  const abort = new AbortController();
  const cadence = redshiftCadence(o.freshnessTargetMs ?? LOCAL_FRESHNESS_TARGET_MS);
  const loop = loader.run({ loadEveryMs: cadence.loadEveryMs, mergeEveryMs: Number.MAX_SAFE_INTEGER }, abort.signal, (what, err) =>
    o.onError(`redshift ${what}`, err),
  );
  return {
    warehouse: new RedshiftWarehouse({ loader }),
    loader,
    async stop() {
      abort.abort();
      await loop;
      await loader.flush().catch((e: unknown) => o.onError('redshift load', e));
      await client.end().catch(() => undefined);
    },
  };
}
