import { RemovalPolicy, Resource, type IResource } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import type * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import type { Construct } from 'constructs';
import { checkRequiredProps } from './private/validate.ts';

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
}

/**
 * The control-plane table: PAY_PER_REQUEST, point-in-time recovery, encrypted with a
 * customer-managed key, retained by default.
 */
export class ControlPlane extends ControlPlaneBase {
  /**
   * Refers to a control plane deployed elsewhere (another stack, account or region). Its account
   * and region come from `tableArn`.
   */
  static fromControlPlaneAttributes(scope: Construct, id: string, attrs: ControlPlaneAttributes): IControlPlane {
    class Import extends ControlPlaneBase {
      readonly table: dynamodb.ITable;
      constructor() {
        super(scope, id, { environmentFromArn: attrs.tableArn });
        checkRequiredProps(this, 'ControlPlane.fromControlPlaneAttributes', attrs, ['tableArn']);
        this.table = dynamodb.Table.fromTableAttributes(this, 'Table', { tableArn: attrs.tableArn, encryptionKey: attrs.encryptionKey });
      }
    }
    return new Import();
  }

  readonly table: dynamodb.ITable;
  /** The key that encrypts the table. */
  readonly encryptionKey: kms.IKey;

  constructor(scope: Construct, id: string, props: ControlPlaneProps = {}) {
    super(scope, id);
    const removalPolicy = props.removalPolicy ?? RemovalPolicy.RETAIN;
    this.encryptionKey =
      props.encryptionKey ??
      new kms.Key(this, 'Key', {
        description: `Created by ${this.node.path}`,
        enableKeyRotation: true,
        removalPolicy,
      });
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
  }
}
