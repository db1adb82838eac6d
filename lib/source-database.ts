import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { databasePeer, requireOptions } from './private/validate.ts';

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
   * Credentials the heartbeat writer uses: the same shape, for its own user that may only write
   * the heartbeat table (see docs/deploy.md). Required, and never the capture secret: the
   * heartbeat writer runs every minute and must not hold the replication identity.
   */
  readonly heartbeatSecret: secretsmanager.ISecret;
  /**
   * How DMS and the functions verify the server's TLS certificate. `VERIFY_FULL` checks the
   * chain against `caCertificatePem` (DMS) or Node's trusted CAs plus the Amazon RDS CAs (the
   * functions) and the host name; `REQUIRE` encrypts without verifying, an explicit opt-out for
   * self-signed test servers. Every function that connects to the source gets it as a minimum:
   * a secret whose `sslmode` asks for less is refused (docs/deploy.md, "TLS to the source").
   * @default SslMode.VERIFY_FULL
   */
  readonly sslMode?: SslMode;
  /**
   * PEM of the CA certificate(s) that sign the server's certificate, imported as a DMS
   * certificate for `verify-full` and given to every function that connects to the source.
   * Set it for a self-managed server with a private CA.
   * @default - the Amazon RDS root CAs of every region (RDS and Aurora)
   */
  readonly caCertificatePem?: string;
  /**
   * Credentials the slot monitor uses: the same shape, for a read-only user (member of
   * `pg_monitor`, or any user: `pg_replication_slots` is readable by all) that can write nothing.
   * @default - the capture secret
   */
  readonly monitoringSecret?: secretsmanager.ISecret;
  /**
   * The database's security group: each member of the `CdcSource` (and each `Reconciler`
   * function of it) may send to it on `port`, and it admits them there (the ingress rule is added
   * to it). The replication slot is prepared only after these rules exist. Name the database by
   * this or by `peer`: synth fails when neither is given (docs/deploy.md, "Network").
   * @default - none; then `peer` is required
   */
  readonly securityGroup?: ec2.ISecurityGroup;
  /**
   * The database's address range, when it has no security group this app may add a rule to (a
   * self-managed server, a peered VPC, on premises, a group another stack owns): a CIDR block
   * (`ec2.Peer.ipv4('10.20.0.0/24')`), a prefix list, or `ec2.Peer.securityGroupId(id)`. Each
   * member may send to it on `port` (egress only: the database's side admits them).
   * @default - none; then `securityGroup` is required
   */
  readonly peer?: ec2.IPeer;
  /**
   * The database port (for the rules of `securityGroup` or `peer`).
   * @default 5432
   */
  readonly port?: number;
  /**
   * How much the snapshot worker may add to this database's load (docs/snapshot.md "The budget").
   * @default - at most 10 % added p99 write latency and 5 percentage points of added CPU
   */
  readonly snapshotBudget?: SnapshotBudget;
  /**
   * Credentials and address of a read replica the snapshot worker reads chunks from (the fence
   * still runs on the primary). Same secret shape as `secret`.
   * @default - chunks are read from the primary
   */
  readonly readReplicaSecret?: secretsmanager.ISecret;
  /**
   * The RDS DB instance identifier of the database: its CloudWatch `WriteLatency` and
   * `CPUUtilization` then join the snapshot's pressure probe (the CPU half of the budget needs it).
   * @default - the snapshot paces on probe writes only
   */
  readonly instanceIdentifier?: string;
}

/** A source's snapshot budget, in percent over the load measured before the snapshot started. */
export interface SnapshotBudget {
  /** Added p99 write latency, percent. @default 10 */
  readonly writeLatencyPercent?: number;
  /** Added CPU, percentage points. @default 5 */
  readonly cpuPercent?: number;
}

/** TLS to a database: how the server certificate is checked. */
export enum SslMode {
  /** Encrypted; the certificate chain and the host name are verified (DMS `verify-full`). */
  VERIFY_FULL = 'verify-full',
  /** Encrypted, the certificate not verified: an explicit opt-out for self-signed test servers. */
  REQUIRE = 'require',
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
  /** Heartbeat-writer credentials and address (its own user, never the capture user). */
  readonly heartbeatSecret: secretsmanager.ISecret;
  /** How the server's TLS certificate is checked. */
  readonly sslMode: SslMode;
  /** The CA bundle for `verify-full`, when not the Amazon RDS CAs. */
  readonly caCertificatePem?: string;
  /** Slot-monitor credentials and address. */
  readonly monitoringSecret: secretsmanager.ISecret;
  /** The database's security group, when the source should admit itself. */
  readonly securityGroup?: ec2.ISecurityGroup;
  /** The database's address range, when it is named by address instead of a security group. */
  readonly peer?: ec2.IPeer;
  /** The database port. */
  readonly port: number;
  /** The snapshot budget (undefined: the defaults). */
  readonly snapshotBudget?: SnapshotBudget;
  /** The read replica the snapshot reads from, if any. */
  readonly readReplicaSecret?: secretsmanager.ISecret;
  /** The RDS instance whose CloudWatch metrics pace the snapshot, if named. */
  readonly instanceIdentifier?: string;

  private constructor(engine: SourceEngine, options: PostgresSourceOptions) {
    this.engine = engine;
    this.databaseName = options.databaseName;
    this.secret = options.secret;
    if (!options.heartbeatSecret)
      throw new Error('SourceDatabase.postgres: heartbeatSecret is required (the heartbeat writer has its own user; see docs/deploy.md, section 2.2)');
    if (options.heartbeatSecret === options.secret) {
      throw new Error(
        'SourceDatabase.postgres: heartbeatSecret must not be the capture secret; give the heartbeat writer its own user that may only write the heartbeat table (docs/deploy.md, section 2.2)',
      );
    }
    this.heartbeatSecret = options.heartbeatSecret;
    this.sslMode = options.sslMode ?? SslMode.VERIFY_FULL;
    if (options.caCertificatePem !== undefined && !options.caCertificatePem.includes('-----BEGIN CERTIFICATE-----')) {
      throw new Error('SourceDatabase.postgres: caCertificatePem must be PEM text with at least one -----BEGIN CERTIFICATE----- block');
    }
    this.caCertificatePem = options.caCertificatePem;
    this.monitoringSecret = options.monitoringSecret ?? options.secret;
    this.securityGroup = options.securityGroup;
    this.peer = databasePeer('SourceDatabase.postgres', options);
    this.port = options.port ?? 5432;
    this.snapshotBudget = options.snapshotBudget;
    this.readReplicaSecret = options.readReplicaSecret;
    this.instanceIdentifier = options.instanceIdentifier;
  }
}
