import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { SslMode } from './source-database.ts';
import { databasePeer, requireOptions } from './private/validate.ts';

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
   * The warehouse's security group: the `WarehouseSink`'s applier (and the functions of a
   * `WarehouseRebuild` or `Reconciler` of it) may send to it on `port`, and it admits them there.
   * Name the warehouse by this or by `peer`: synth fails when neither is given (docs/deploy.md, "Network").
   * @default - none; then `peer` is required
   */
  readonly securityGroup?: ec2.ISecurityGroup;
  /**
   * The warehouse's address range, when it has no security group this app may add a rule to: a
   * CIDR block (`ec2.Peer.ipv4('10.30.0.0/24')`), a prefix list, or `ec2.Peer.securityGroupId(id)`.
   * The functions may send to it on `port` (egress only: the warehouse's side admits them).
   * @default - none; then `securityGroup` is required
   */
  readonly peer?: ec2.IPeer;
  /**
   * The warehouse port (for the rules of `securityGroup` or `peer`).
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
  /** The warehouse's address range, when it is named by address instead of a security group. */
  readonly peer?: ec2.IPeer;
  /** The warehouse port. */
  readonly port: number;

  private constructor(engine: WarehouseEngine, options: WarehouseConnectionOptions) {
    this.engine = engine;
    this.secret = options.secret;
    this.sslMode = options.sslMode ?? SslMode.VERIFY_FULL;
    this.securityGroup = options.securityGroup;
    this.peer = databasePeer(`WarehouseConnection.${engine}`, options);
    this.port = options.port ?? (engine === WarehouseEngine.REDSHIFT ? 5439 : 5432);
  }
}
