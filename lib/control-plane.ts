import { Duration, RemovalPolicy, Resource, Stack, Validations, type IResource } from 'aws-cdk-lib';
import type * as apigateway from 'aws-cdk-lib/aws-apigateway';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as s3 from 'aws-cdk-lib/aws-s3';
import { S3_SERVER_ACCESS_LOGS_USE_BUCKET_POLICY } from 'aws-cdk-lib/cx-api';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { OperatorFunctions } from './private/operator-function.ts';
import { createPlatformKey } from './private/platform-key.ts';
import { accessLogsBucket, dataBucketProps } from './private/platform-bucket.ts';
import { ControlPartition } from '../contracts/control-plane-keys.ts';
import { NORMALIZER_STAGE } from '../contracts/metrics.ts';
import { checkRequiredProps } from './private/validate.ts';

/**
 * Partitions of the control table one function may touch, as partition-key values
 * (`ControlPartition` in contracts/control-plane-keys.ts); a trailing `*` matches a prefix. Each
 * list becomes one statement conditioned on `dynamodb:LeadingKeys`.
 */
export interface ControlPlaneItemAccess {
  /**
   * Partitions the grantee may read (`GetItem`, `Query`).
   * @default - none
   */
  readonly read?: string[];
  /**
   * Partitions the grantee may put items into (`PutItem`, also inside `TransactWriteItems`).
   * @default - none
   */
  readonly put?: string[];
  /**
   * Partitions whose items the grantee may update (`UpdateItem`, also inside `TransactWriteItems`).
   * @default - none
   */
  readonly update?: string[];
  /**
   * Partitions whose items the grantee may delete (`DeleteItem`): a Redshift sink's answered load
   * requests (docs/warehouse-apply.md, "Redshift: the applier"). Never the audit partition (denied).
   * @default - none
   */
  readonly remove?: string[];
}

/** Writes to the audit partition that IAM denies to every function of the platform: the audit log is append-only. */
const AUDIT_DENIED_ACTIONS = ['dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:BatchWriteItem', 'dynamodb:PartiQLUpdate', 'dynamodb:PartiQLDelete'];

/**
 * The control plane: one DynamoDB table holding offsets, schema versions, table states, snapshot
 * progress, verdicts and the audit log (docs/architecture.md §5.3). Partition key `pk`, sort key `sk`, both
 * strings.
 */
export interface IControlPlane extends IResource {
  /** The DynamoDB table. */
  readonly table: dynamodb.ITable;
  /**
   * Name of the control-plane table.
   * @attribute
   */
  readonly controlPlaneTableName: string;
  /**
   * ARN of the control-plane table.
   * @attribute
   */
  readonly controlPlaneTableArn: string;
  /** Read and write items (and use the table's key). */
  grantReadWriteData(grantee: iam.IGrantable): iam.Grant;
  /** Read items (and decrypt with the table's key). */
  grantReadData(grantee: iam.IGrantable): iam.Grant;
  /**
   * Only the given partitions (`dynamodb:LeadingKeys`), only `GetItem`/`Query`/`PutItem`/
   * `UpdateItem` (`DeleteItem` only in the partitions `remove` names), never `Scan` or `BatchWriteItem`; and an explicit deny of
   * updates and deletes in the audit partition, so that the grantee can only append to it.
   */
  grantItems(grantee: iam.IGrantable, access: ControlPlaneItemAccess): iam.Grant;
  /**
   * What a source's normalizer needs: its own table records and schema versions (read, put,
   * update), its `SOURCES` entry (update), audit entries and the normalizers' dead letters
   * (append).
   */
  grantNormalizer(grantee: iam.IGrantable, sourceId: string): iam.Grant;
  /**
   * What a sink's applier needs: its own progress (read, update); the table records and schema
   * versions of the sources it mirrors (read, and update of the table record, to mark a table
   * `degraded` with a dead letter); audit entries and its own dead letters (append).
   */
  grantSinkApplier(grantee: iam.IGrantable, sinkId: string, sourceIds: string[]): iam.Grant;
  /**
   * The payload bucket: dead letters' whole records and change events too large for one stream
   * record (docs/large-records.md). Undefined for an imported control plane without one.
   */
  readonly payloadBucket?: s3.IBucket;
  /** The key that encrypts the payload bucket's objects. */
  readonly payloadEncryptionKey?: kms.IKey;
  /**
   * Write payloads under one key prefix of the payload bucket (`s3:PutObject` on `<prefix>*` only,
   * and encrypt with its key). No-op without a payload bucket.
   */
  grantPayloadWrite(grantee: iam.IGrantable, prefix: string): void;
  /** Read payloads under one key prefix of the payload bucket (`s3:GetObject` on `<prefix>*` only, and decrypt). */
  grantPayloadRead(grantee: iam.IGrantable, prefix: string): void;
}

/** Properties of a `ControlPlane`. */
export interface ControlPlaneProps {
  /**
   * Customer-managed key that encrypts the table.
   * @default - a new key with rotation enabled
   */
  readonly encryptionKey?: kms.IKey;
  /**
   * What happens to the table (and the key this construct creates) when it leaves the stack.
   * @default RemovalPolicy.RETAIN
   */
  readonly removalPolicy?: RemovalPolicy;
  /**
   * The change log's retention, which the operator API checks a pause against (a pause must end
   * while its held events are still in the log). Pass the ChangeLog's `retention`.
   * @default Duration.hours(24) - Kinesis' default retention (the conservative choice)
   */
  readonly changeLogRetention?: Duration;
  /**
   * Per source id, the longest pause its declared slot/WAL budget allows; longer pauses are refused.
   * @default - no budget declared
   */
  readonly pauseBudgets?: Record<string, Duration>;
  /**
   * Whether to create the recommended alarms (errors of the operator functions).
   * @default true
   */
  readonly alarmsEnabled?: boolean;
  /**
   * Actions for the alarms' ALARM and OK transitions.
   * @default - none
   */
  readonly alarmActions?: cloudwatch.IAlarmAction[];
  /**
   * How long the payload bucket keeps dead letters' whole records and out-of-line change events.
   * Keep it at least as long as the change log's archive retention, so a replay from the archive
   * can still resolve its claim checks.
   * @default Duration.days(400)
   */
  readonly payloadRetention?: Duration;
}

/** Attributes of an existing control plane, for `ControlPlane.fromControlPlaneAttributes`. */
export interface ControlPlaneAttributes {
  /** ARN of the control-plane table. */
  readonly tableArn: string;
  /**
   * The table's customer-managed key.
   * @default - grants do not cover a key
   */
  readonly encryptionKey?: kms.IKey;
  /**
   * The payload bucket's name.
   * @default - no payload bucket: large dead letters are cut, large events dead-lettered
   */
  readonly payloadBucketName?: string;
  /**
   * The payload bucket's key.
   * @default - grants do not cover a key
   */
  readonly payloadEncryptionKey?: kms.IKey;
}

abstract class ControlPlaneBase extends Resource implements IControlPlane {
  abstract readonly table: dynamodb.ITable;

  get controlPlaneTableName(): string {
    return this.table.tableName;
  }

  get controlPlaneTableArn(): string {
    return this.table.tableArn;
  }

  grantReadWriteData(grantee: iam.IGrantable): iam.Grant {
    return this.table.grantReadWriteData(grantee);
  }

  grantReadData(grantee: iam.IGrantable): iam.Grant {
    return this.table.grantReadData(grantee);
  }

  grantItems(grantee: iam.IGrantable, access: ControlPlaneItemAccess): iam.Grant {
    const statements: Array<[string[], string[]]> = [
      [['dynamodb:GetItem', 'dynamodb:Query'], access.read ?? []],
      [['dynamodb:PutItem'], access.put ?? []],
      [['dynamodb:UpdateItem'], access.update ?? []],
      [['dynamodb:DeleteItem'], access.remove ?? []],
    ];
    let grant: iam.Grant | undefined;
    for (const [actions, partitions] of statements) {
      if (partitions.length === 0) continue;
      const g = iam.Grant.addToPrincipal({
        grantee,
        actions,
        resourceArns: [this.table.tableArn],
        // ForAllValues: every partition key the request touches is one of these (Scan, which has
        // none, is not granted at all).
        conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [...new Set(partitions)].sort() } },
      });
      grant = grant ? grant.combine(g) : g;
    }
    grantee.grantPrincipal.addToPrincipalPolicy(
      new iam.PolicyStatement({
        effect: iam.Effect.DENY,
        actions: AUDIT_DENIED_ACTIONS,
        resources: [this.table.tableArn],
        conditions: { 'ForAnyValue:StringEquals': { 'dynamodb:LeadingKeys': [ControlPartition.AUDIT] } },
      }),
    );
    const writes = (access.put?.length ?? 0) + (access.update?.length ?? 0) + (access.remove?.length ?? 0) > 0;
    const key = this.table.encryptionKey;
    if (key) {
      const k = writes ? key.grantEncryptDecrypt(grantee) : key.grantDecrypt(grantee);
      grant = grant ? grant.combine(k) : k;
    }
    return grant ?? iam.Grant.drop(grantee, 'no control-plane partitions');
  }

  grantNormalizer(grantee: iam.IGrantable, sourceId: string): iam.Grant {
    const own = [ControlPartition.source(sourceId), ControlPartition.schemasOf(sourceId)];
    // The last accepted heartbeat of the source (continuity check: missed or regressed beats, identity, timeline).
    const beat = ControlPartition.checkpoint(`heartbeat:${sourceId}`);
    return this.grantItems(grantee, {
      read: [...own, beat],
      put: [...own, beat, ControlPartition.AUDIT, ControlPartition.deadLetters(NORMALIZER_STAGE), ControlPartition.DEAD_LETTER_STAGES],
      update: [ControlPartition.source(sourceId), ControlPartition.SOURCES],
    });
  }

  grantSinkApplier(grantee: iam.IGrantable, sinkId: string, sourceIds: string[]): iam.Grant {
    return this.grantItems(grantee, {
      read: [ControlPartition.sink(sinkId), ...sourceIds.flatMap((s) => [ControlPartition.source(s), ControlPartition.schemasOf(s)])],
      put: [ControlPartition.AUDIT, ControlPartition.deadLetters(sinkId), ControlPartition.DEAD_LETTER_STAGES],
      update: [ControlPartition.sink(sinkId), ...sourceIds.map((s) => ControlPartition.source(s))],
    });
  }

  abstract readonly payloadBucket?: s3.IBucket;
  abstract readonly payloadEncryptionKey?: kms.IKey;

  grantPayloadWrite(grantee: iam.IGrantable, prefix: string): void {
    if (!this.payloadBucket) return;
    iam.Grant.addToPrincipal({ grantee, actions: ['s3:PutObject'], resourceArns: [this.payloadBucket.arnForObjects(`${prefix}*`)] });
    this.payloadEncryptionKey?.grantEncrypt(grantee);
    this.acknowledgePrefix(grantee, prefix);
  }

  grantPayloadRead(grantee: iam.IGrantable, prefix: string): void {
    if (!this.payloadBucket) return;
    iam.Grant.addToPrincipal({ grantee, actions: ['s3:GetObject'], resourceArns: [this.payloadBucket.arnForObjects(`${prefix}*`)] });
    this.payloadEncryptionKey?.grantDecrypt(grantee);
    this.acknowledgePrefix(grantee, prefix);
  }

  /** The object wildcard of a prefix grant is the narrowest there is: object keys are generated per payload. */
  private acknowledgePrefix(grantee: iam.IGrantable, prefix: string): void {
    // The finding is on the policy of the principal (a function's role may live outside the function's subtree).
    const scope = grantee.grantPrincipal instanceof Construct ? grantee.grantPrincipal : grantee instanceof Construct ? grantee : null;
    if (!scope || !(this.payloadBucket instanceof s3.Bucket)) return;
    const id = Stack.of(this.payloadBucket).getLogicalId(this.payloadBucket.node.defaultChild as s3.CfnBucket);
    Validations.of(scope).acknowledge({
      id: `AwsSolutions-IAM5[Resource::<${id}.Arn>/${prefix}*]`,
      reason: `objects under ${prefix} of the payload bucket only; their keys are generated per dead letter or event (docs/large-records.md)`,
    });
  }
}

/** A control plane of this app with its operator function: what a `WarehouseRebuild` registers with. */
export interface IOperatedControlPlane extends IControlPlane {
  /** Lets the operator function start rebuilds of one sink's tables (docs/rebuild.md, "On AWS"). */
  addRebuildWorker(sinkId: string, worker: lambda.IFunction, stateMachine: sfn.IStateMachine): void;
}

/**
 * The control-plane table: PAY_PER_REQUEST, point-in-time recovery, encrypted with a
 * customer-managed key, retained by default.
 */
export class ControlPlane extends ControlPlaneBase implements IOperatedControlPlane {
  /**
   * Refers to a control plane deployed elsewhere (another stack, account or region). Its account
   * and region come from `tableArn`.
   */
  static fromControlPlaneAttributes(scope: Construct, id: string, attrs: ControlPlaneAttributes): IControlPlane {
    class Import extends ControlPlaneBase {
      readonly table: dynamodb.ITable;
      readonly payloadBucket?: s3.IBucket;
      readonly payloadEncryptionKey?: kms.IKey;
      constructor() {
        super(scope, id, { environmentFromArn: attrs.tableArn });
        checkRequiredProps(this, 'ControlPlane.fromControlPlaneAttributes', attrs, ['tableArn']);
        this.table = dynamodb.Table.fromTableAttributes(this, 'Table', { tableArn: attrs.tableArn, encryptionKey: attrs.encryptionKey });
        if (attrs.payloadBucketName) this.payloadBucket = s3.Bucket.fromBucketName(this, 'Payloads', attrs.payloadBucketName);
        this.payloadEncryptionKey = attrs.payloadEncryptionKey;
      }
    }
    return new Import();
  }

  readonly table: dynamodb.ITable;
  /** The key that encrypts the table (and the payload bucket). */
  readonly encryptionKey: kms.IKey;
  /** The operator function (operate and destructive classes), behind `operatorApi` only. */
  readonly operatorFunction: lambda.IFunction;
  /** The read-only operator function (read class: status, audit), behind `operatorApi` only. */
  readonly statusFunction: lambda.IFunction;
  /**
   * The operator API: IAM-authorized (SigV4), one resource per action, grouped by action class
   * (docs/deploy.md "Security: operators, who may do what"); `grantReadStatus`, `grantOperate`, `grantDestructiveActions`.
   */
  readonly operatorApi: apigateway.IRestApi;
  /** The alarms this construct created (empty when `alarmsEnabled` is false). */
  readonly alarms: cloudwatch.IAlarm[];
  readonly payloadBucket?: s3.IBucket;
  readonly payloadEncryptionKey?: kms.IKey;
  private readonly operatorFunctions: OperatorFunctions;

  constructor(scope: Construct, id: string, props: ControlPlaneProps = {}) {
    super(scope, id);
    // Server access logs are delivered through a bucket policy (not the log-delivery ACL), as in ChangeLog.
    this.node.setContext(S3_SERVER_ACCESS_LOGS_USE_BUCKET_POLICY, true);
    const removalPolicy = props.removalPolicy ?? RemovalPolicy.RETAIN;
    this.encryptionKey = props.encryptionKey ?? createPlatformKey(this, 'Key', removalPolicy, `Created by ${this.node.path}`);
    const table = new dynamodb.Table(this, 'Table', {
      partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'sk', type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      encryption: dynamodb.TableEncryption.CUSTOMER_MANAGED,
      encryptionKey: this.encryptionKey,
      removalPolicy,
    });
    this.table = table;
    // Payloads too large for their carrier (docs/large-records.md): encrypted with the same key,
    // private, TLS only, versioned, access-logged, kept for `payloadRetention`.
    const accessLogs = accessLogsBucket(this, 'PayloadAccessLogs', {
      logged: 'the payload bucket',
      expiration: props.payloadRetention ?? Duration.days(400),
      removalPolicy,
    });
    this.payloadEncryptionKey = this.encryptionKey;
    this.payloadBucket = new s3.Bucket(this, 'Payloads', {
      ...dataBucketProps(this.encryptionKey),
      serverAccessLogsBucket: accessLogs,
      serverAccessLogsPrefix: 'payloads/',
      lifecycleRules: [
        {
          id: 'expire-at-payload-retention',
          expiration: props.payloadRetention ?? Duration.days(400),
          noncurrentVersionExpiration: Duration.days(30),
          abortIncompleteMultipartUploadAfter: Duration.days(7),
        },
      ],
      removalPolicy,
    });

    const operator = new OperatorFunctions(this, 'OperatorApi', {
      table,
      logKey: this.encryptionKey,
      changeLogRetention: props.changeLogRetention ?? Duration.hours(24),
      pauseBudgets: props.pauseBudgets,
      alarmsEnabled: props.alarmsEnabled ?? true,
      alarmActions: props.alarmActions,
    });
    this.operatorFunctions = operator;
    this.operatorFunction = operator.operator.fn;
    this.statusFunction = operator.status.fn;
    this.operatorApi = operator.api;
    this.alarms = operator.alarms;
  }

  /**
   * Lets the operator function start rebuilds of one sink's tables (a `WarehouseRebuild` calls
   * it): the function learns the sink's rebuild worker and state machine, and may invoke the one
   * and start executions of the other (docs/rebuild.md, "On AWS").
   */
  addRebuildWorker(sinkId: string, worker: lambda.IFunction, stateMachine: sfn.IStateMachine): void {
    this.operatorFunctions.addRebuildWorker(sinkId, worker, stateMachine);
  }

  /**
   * Lets `grantee` read status and the audit log (the read class): `execute-api:Invoke` on the
   * operator API's `/read/*` routes, whose function's role cannot write.
   */
  grantReadStatus(grantee: iam.IGrantable): iam.Grant {
    return this.operatorFunctions.grantRoutes(grantee, ['read']);
  }

  /**
   * Lets `grantee` pause and resume tables (the operate class) and read status and the audit log:
   * `execute-api:Invoke` on the `/read/*` and `/operate/*` routes. Not accept-schema, resnapshot
   * or rebuild (`grantDestructiveActions`).
   */
  grantOperate(grantee: iam.IGrantable): iam.Grant {
    return this.operatorFunctions.grantRoutes(grantee, ['read', 'operate']);
  }

  /**
   * Lets `grantee` take the destructive actions: accept a breaking schema change, re-snapshot and
   * rebuild a table (`execute-api:Invoke` on the `/destructive/*` routes). Grants only that class:
   * combine with `grantOperate` for an operator who may do everything.
   */
  grantDestructiveActions(grantee: iam.IGrantable): iam.Grant {
    return this.operatorFunctions.grantRoutes(grantee, ['destructive']);
  }
}
