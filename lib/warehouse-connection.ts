import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { SslMode } from './source-database.ts';
import { requireOptions } from './private/validate.ts';

/** Options of `WarehouseConnection.redshift` and `WarehouseConnection.postgres`. */
export interface WarehouseConnectionOptions {
  /**
   * Credentials and address of the applier's user: a JSON secret with `host`, `port`,
   * `username`, `password` and `dbname` (the shape RDS and Redshift generate).
   */
  readonly secret: secretsmanager.ISecret;
  /**
   * How the applier verifies the warehouse's TLS certificate (against Node's trusted CAs, which
   * sign Redshift's certificates, plus the Amazon RDS CAs). `REQUIRE` is an explicit opt-out for
   * self-signed test servers.
   * @default SslMode.VERIFY_FULL
   */
  readonly sslMode?: SslMode;
  /**
   * The warehouse's security group. When given, the `WarehouseSink` admits its applier on `port`
   * (ingress there, egress on its own group).
   * @default - none: admit `sink.connections` on the warehouse port yourself (`sink.connections.allowTo(warehouse, port)`)
   */
  readonly securityGroup?: ec2.ISecurityGroup;
  /**
   * The warehouse port (for the rules with `securityGroup`).
   * @default - 5439 for Redshift, 5432 for PostgreSQL
   */
  readonly port?: number;
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
  /** How the warehouse's TLS certificate is checked. */
  readonly sslMode: SslMode;
  /** The warehouse's security group, when the sink should admit itself. */
  readonly securityGroup?: ec2.ISecurityGroup;
  /** The warehouse port. */
  readonly port: number;

  private constructor(engine: WarehouseEngine, options: WarehouseConnectionOptions) {
    this.engine = engine;
    this.secret = options.secret;
    this.sslMode = options.sslMode ?? SslMode.VERIFY_FULL;
    this.securityGroup = options.securityGroup;
    this.port = options.port ?? (engine === WarehouseEngine.REDSHIFT ? 5439 : 5432);
  }
}
