import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { requireOptions } from './private/validate.ts';

/** Options of `SourceDatabase.postgres`. */
export interface PostgresSourceOptions {
  /** The database to capture. */
  readonly databaseName: string;
  /**
   * Credentials and address of the capture user: a JSON secret with `host`, `port`, `username`
   * and `password` (the shape RDS generates). DMS reads it through a role this library creates.
   * The user needs logical replication privileges (see docs/deploy.md).
   */
  readonly secret: secretsmanager.ISecret;
  /**
   * Credentials the heartbeat writer uses: the same shape, for a user that may only write the
   * heartbeat table.
   * @default - the capture secret
   */
  readonly heartbeatSecret?: secretsmanager.ISecret;
  /**
   * The database's security group. When given, the `CdcSource` admits its own security group on
   * `port` and prepares the replication slot only after that rule exists.
   * @default - none: admit `source.connections` on the database port yourself
   */
  readonly securityGroup?: ec2.ISecurityGroup;
  /**
   * The database port (for the ingress rule with `securityGroup`).
   * @default 5432
   */
  readonly port?: number;
}

/** Supported source engines. */
export enum SourceEngine {
  /** PostgreSQL (RDS, Aurora or self-managed) through logical decoding with `test_decoding`. */
  POSTGRES = 'postgres',
}

/** The database a `CdcSource` captures. */
export class SourceDatabase {
  /** A PostgreSQL database, captured through a logical replication slot. */
  static postgres(options: PostgresSourceOptions): SourceDatabase {
    requireOptions('SourceDatabase.postgres', options, ['databaseName', 'secret']);
    return new SourceDatabase(SourceEngine.POSTGRES, options);
  }

  /** The engine. */
  readonly engine: SourceEngine;
  /** The database name. */
  readonly databaseName: string;
  /** Capture credentials and address. */
  readonly secret: secretsmanager.ISecret;
  /** Heartbeat-writer credentials and address. */
  readonly heartbeatSecret: secretsmanager.ISecret;
  /** The database's security group, when the source should admit itself. */
  readonly securityGroup?: ec2.ISecurityGroup;
  /** The database port. */
  readonly port: number;

  private constructor(engine: SourceEngine, options: PostgresSourceOptions) {
    this.engine = engine;
    this.databaseName = options.databaseName;
    this.secret = options.secret;
    this.heartbeatSecret = options.heartbeatSecret ?? options.secret;
    this.securityGroup = options.securityGroup;
    this.port = options.port ?? 5432;
  }
}
