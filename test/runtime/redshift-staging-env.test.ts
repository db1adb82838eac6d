/**
 * The Redshift staging settings the handlers read (docs/warehouse-apply.md, "Redshift: the applier"):
 * the applier keeps the portable path without a staging bucket, and both sides name the variable
 * that is missing or malformed.
 */
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { EnvName } from '../../contracts/env.ts';
import { StagedRedshiftLoader } from '../../lambda/adapters/redshift-staged-loader.ts';
import { RedshiftWarehouse } from '../../lambda/adapters/warehouse-redshift.ts';
import { stagedLoaderFromEnvironment } from '../../lambda/runtime/redshift-loader.ts';
import { redshiftWriterFromEnvironment } from '../../lambda/runtime/redshift-submitter.ts';

const saved = { ...process.env };
afterEach(() => {
  process.env = { ...saved };
});

const set = (vars: Record<string, string>): void => {
  for (const [k, v] of Object.entries(vars)) process.env[k] = v;
};

describe('Redshift staging from the environment', () => {
  // Never connected: building the writer opens nothing.
  const pool = new pg.Pool({ connectionString: 'postgres://nobody@127.0.0.1:1/none' });
  afterAll(() => pool.end());

  it('the applier stages only when the construct set a staging bucket, and names what is missing', () => {
    delete process.env[EnvName.REDSHIFT_STAGING_BUCKET];
    expect(redshiftWriterFromEnvironment(pool, 'control', 'wh')).toBeUndefined();
    set({ [EnvName.REDSHIFT_STAGING_BUCKET]: 'staging', [EnvName.REDSHIFT_STAGING_PREFIX]: 'cdc/wh/', [EnvName.REDSHIFT_LOADER_FUNCTION]: 'loader' });
    expect(() => redshiftWriterFromEnvironment(pool, 'control', 'wh')).toThrow(EnvName.REDSHIFT_LOAD_WAIT_MS);
    set({ [EnvName.REDSHIFT_LOAD_WAIT_MS]: 'soon' });
    expect(() => redshiftWriterFromEnvironment(pool, 'control', 'wh')).toThrow(`${EnvName.REDSHIFT_LOAD_WAIT_MS}: expected a positive number of ms`);
    set({ [EnvName.REDSHIFT_LOAD_WAIT_MS]: '240000' });
    expect(redshiftWriterFromEnvironment(pool, 'control', 'wh')).toBeInstanceOf(RedshiftWarehouse);
  });

  it('the loader names the variable that is missing or malformed', async () => {
    const log = (): void => undefined;
    set({
      [EnvName.WAREHOUSE_URL]: 'postgres://nobody@127.0.0.1:1/none',
      [EnvName.SINK_ID]: 'wh',
      [EnvName.CONTROL_TABLE]: 'control',
      [EnvName.REDSHIFT_STAGING_BUCKET]: 'staging',
      [EnvName.REDSHIFT_STAGING_PREFIX]: 'cdc/wh/',
      [EnvName.FRESHNESS_TARGET_MS]: '300000',
      [EnvName.REDSHIFT_LOADER_TIMEOUT_MS]: '120000',
    });
    await expect(stagedLoaderFromEnvironment(log)).rejects.toThrow(EnvName.REDSHIFT_COPY_ROLE_ARN);
    set({ [EnvName.REDSHIFT_COPY_ROLE_ARN]: 'arn:aws:iam::123456789012:role/cdc-copy', [EnvName.FRESHNESS_TARGET_MS]: '5m' });
    await expect(stagedLoaderFromEnvironment(log)).rejects.toThrow(`${EnvName.FRESHNESS_TARGET_MS}: expected a positive number of ms`);
    set({ [EnvName.FRESHNESS_TARGET_MS]: '300000' });
    expect(await stagedLoaderFromEnvironment(log)).toBeInstanceOf(StagedRedshiftLoader);
  });
});
