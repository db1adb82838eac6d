import { Validations } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct } from 'constructs';

/**
 * The two account-wide roles DMS expects under fixed names when it is driven by CloudFormation
 * rather than the console: `dms-vpc-role` (lets DMS manage network interfaces for replication
 * subnet groups) and `dms-cloudwatch-logs-role` (task logs). They exist once per account: create
 * this construct in exactly one stack of the account, and not at all when the roles already
 * exist (the DMS console creates them on first use). Make stacks with a `CdcSource` depend on it
 * when they share a deployment (`source.node.addDependency(roles)`).
 */
export class DmsServiceRoles extends Construct {
  /** `dms-vpc-role`. */
  readonly vpcRole: iam.IRole;
  /** `dms-cloudwatch-logs-role`. */
  readonly cloudWatchLogsRole: iam.IRole;

  constructor(scope: Construct, id: string) {
    super(scope, id);
    const principal = new iam.ServicePrincipal('dms.amazonaws.com');
    this.vpcRole = new iam.Role(this, 'VpcRole', {
      roleName: 'dms-vpc-role',
      assumedBy: principal,
      managedPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName('service-role/AmazonDMSVPCManagementRole')],
    });
    this.cloudWatchLogsRole = new iam.Role(this, 'CloudWatchLogsRole', {
      roleName: 'dms-cloudwatch-logs-role',
      assumedBy: principal,
      managedPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName('service-role/AmazonDMSCloudWatchLogsRole')],
    });
    Validations.of(this).acknowledge(
      {
        id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonDMSVPCManagementRole]',
        reason: 'DMS requires the role dms-vpc-role with exactly this AWS managed policy',
      },
      {
        id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonDMSCloudWatchLogsRole]',
        reason: 'DMS requires the role dms-cloudwatch-logs-role with exactly this AWS managed policy',
      },
    );
  }
}
