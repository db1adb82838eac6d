import { Stack, Token, Validations } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct, type IConstruct } from 'constructs';

/**
 * The `DmsServiceRoles` of each app, to refuse a second one in the same account: the roles have
 * fixed names, so a second deployment of them in the same account fails, whatever its region. A
 * symbol from the global registry, so two copies of the library in one app see each other's.
 */
const CREATED = Symbol.for('cdc-platform.DmsServiceRoles');

/** The account a construct's stack deploys to, `*` when synth does not know it (an environment-agnostic stack). */
function accountOf(scope: IConstruct): string {
  const account = Stack.of(scope).account;
  return Token.isUnresolved(account) ? '*' : account;
}

/** IAM role names are unique per account (in every region), and an unknown account may be any. */
function sameAccount(a: string, b: string): boolean {
  return a === '*' || b === '*' || a === b;
}

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
    const root = this.node.root as IConstruct & { [CREATED]?: DmsServiceRoles[] };
    const account = accountOf(this);
    const earlier = (root[CREATED] ??= []).find((other) => sameAccount(accountOf(other), account));
    if (earlier) {
      throw new Error(
        `${this.node.path}: DmsServiceRoles is already created by ${earlier.node.path} for the same account (${account === '*' ? 'the environment-agnostic stack may deploy to any account' : account}); ` +
          'its roles have fixed names (dms-vpc-role, dms-cloudwatch-logs-role) and exist once per account, in every region: keep one DmsServiceRoles per account',
      );
    }
    root[CREATED].push(this);
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
