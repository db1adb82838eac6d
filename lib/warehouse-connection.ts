import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { requireOptions } from './private/validate.ts';

/** Options of `WarehouseConnection.redshift` and `WarehouseConnection.postgres`. */
export interface WarehouseConnectionOptions {
  /**
   * Credentials and address of the applier's user: a JSON secret with `host`, `port`,
   * `username`, `password` and `dbname` (the shape RDS and Redshift generate).
   */
  readonly secret: secretsmanager.ISecret;
}

/** Warehouse engines the applier writes to (both over the PostgreSQL wire protocol). */
export enum WarehouseEngine {
  /** Amazon Redshift (provisioned or serverless). */
  REDSHIFT = 'redshift',
  /** PostgreSQL. */
  POSTGRES = 'postgres',
}

/** How a `WarehouseSink` reaches its warehouse. */
export class WarehouseConnection {
  /** An Amazon Redshift database. */
  static redshift(options: WarehouseConnectionOptions): WarehouseConnection {
    requireOptions('WarehouseConnection.redshift', options, ['secret']);
    return new WarehouseConnection(WarehouseEngine.REDSHIFT, options);
  }

  /** A PostgreSQL database. */
  static postgres(options: WarehouseConnectionOptions): WarehouseConnection {
    requireOptions('WarehouseConnection.postgres', options, ['secret']);
    return new WarehouseConnection(WarehouseEngine.POSTGRES, options);
  }

  /** The engine. */
  readonly engine: WarehouseEngine;
  /** Connection secret. */
  readonly secret: secretsmanager.ISecret;

  private constructor(engine: WarehouseEngine, options: WarehouseConnectionOptions) {
    this.engine = engine;
    this.secret = options.secret;
  }
}
