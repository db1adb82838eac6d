import { RemovalPolicy, Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import { describe, expect, test } from 'vitest';
import { ControlPlane } from '../../lib/index.ts';
import { newApp } from './helpers.ts';

describe('ControlPlane', () => {
  test('default table: pk/sk strings, on demand, PITR, customer-managed key with rotation, retained', () => {
    const stack = new Stack(newApp(), 'S');
    new ControlPlane(stack, 'Control');
    const t = Template.fromStack(stack);
    t.resourceCountIs('AWS::DynamoDB::Table', 1);
    t.hasResource('AWS::DynamoDB::Table', {
      Properties: {
        KeySchema: [
          { AttributeName: 'pk', KeyType: 'HASH' },
          { AttributeName: 'sk', KeyType: 'RANGE' },
        ],
        AttributeDefinitions: Match.arrayWith([
          { AttributeName: 'pk', AttributeType: 'S' },
          { AttributeName: 'sk', AttributeType: 'S' },
        ]),
        BillingMode: 'PAY_PER_REQUEST',
        PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
        SSESpecification: { SSEEnabled: true, SSEType: 'KMS', KMSMasterKeyId: Match.anyValue() },
        TimeToLiveSpecification: Match.absent(),
      },
      DeletionPolicy: 'Retain',
      UpdateReplacePolicy: 'Retain',
    });
    t.hasResource('AWS::KMS::Key', { Properties: { EnableKeyRotation: true }, DeletionPolicy: 'Retain' });
  });

  test('a given key and removal policy are used', () => {
    const stack = new Stack(newApp(), 'S');
    const key = new kms.Key(stack, 'MyKey');
    new ControlPlane(stack, 'Control', { encryptionKey: key, removalPolicy: RemovalPolicy.DESTROY });
    const t = Template.fromStack(stack);
    t.resourceCountIs('AWS::KMS::Key', 1);
    t.hasResource('AWS::DynamoDB::Table', {
      Properties: { SSESpecification: { KMSMasterKeyId: stack.resolve(key.keyArn) } },
      DeletionPolicy: 'Delete',
    });
  });

  test('grantReadWriteData covers the table and its key', () => {
    const stack = new Stack(newApp(), 'S');
    const control = new ControlPlane(stack, 'Control');
    const role = new iam.Role(stack, 'Role', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com') });
    control.grantReadWriteData(role);
    Template.fromStack(stack).hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({ Action: Match.arrayWith(['dynamodb:Query', 'dynamodb:PutItem']), Resource: Match.arrayWith([stack.resolve(control.table.tableArn)]) }),
          Match.objectLike({ Action: Match.arrayWith(['kms:Decrypt', 'kms:Encrypt']), Resource: stack.resolve(control.encryptionKey.keyArn) }),
        ]),
      },
    });
  });

  test('an imported control plane grants on the given table', () => {
    const stack = new Stack(newApp(), 'S');
    const control = ControlPlane.fromControlPlaneAttributes(stack, 'Imported', { tableArn: 'arn:aws:dynamodb:eu-west-1:111111111111:table/cdc-control' });
    expect(control.controlPlaneTableName).toBe('cdc-control');
    const role = new iam.Role(stack, 'Role', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com') });
    control.grantReadData(role);
    Template.fromStack(stack).hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: { Statement: Match.arrayWith([Match.objectLike({ Resource: Match.arrayWith(['arn:aws:dynamodb:eu-west-1:111111111111:table/cdc-control']) })]) },
    });
  });
});
