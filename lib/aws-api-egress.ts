import { Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type { IConstruct } from 'constructs';

/**
 * The AWS APIs the platform's resources in the VPC call (the SDK clients of the database-facing
 * functions, the appliers and workers; DMS's own calls): each as the suffix of its
 * interface-endpoint service name (`com.amazonaws.<region>.<suffix>`). docs/deploy.md, "Network".
 */
const AWS_APIS_CALLED_FROM_THE_VPC: ReadonlyArray<{ readonly suffix: string; readonly api: string }> = [
  { suffix: 'kinesis-streams', api: 'Kinesis Data Streams' },
  { suffix: 'secretsmanager', api: 'Secrets Manager' },
  { suffix: 'dms', api: 'DMS' },
  { suffix: 'dynamodb', api: 'DynamoDB' },
  { suffix: 's3', api: 'S3' },
  { suffix: 'monitoring', api: 'CloudWatch' },
];

/** Owners already given the endpoint check, per VPC (one check per construct, however many groups it has). */
const checked = new WeakMap<IConstruct, Set<ec2.IVpc>>();

/**
 * Where the platform's resources in the VPC (the DMS replication instance, the database-facing
 * functions, the warehouse applier) may send HTTPS to reach AWS APIs (Kinesis, Secrets Manager,
 * DMS, DynamoDB, the CloudFormation response URL in S3). Their security groups allow nothing else
 * outbound except the database or warehouse port (docs/deploy.md, "Network").
 */
export class AwsApiEgress {
  /**
   * Through interface VPC endpoints in the VPC: HTTPS to the VPC's CIDR block only. The
   * interface endpoints (Kinesis, Secrets Manager, DMS, DynamoDB, S3, CloudWatch; private DNS)
   * are yours to create; in a VPC created in the app, synth fails naming any that is missing.
   */
  static vpcEndpoints(): AwsApiEgress {
    return new AwsApiEgress('vpc-endpoints', []);
  }

  /**
   * Through a NAT gateway: HTTPS (TCP 443 only) to any IPv4 address, since AWS's public API
   * addresses are not a fixed set.
   */
  static natGateway(): AwsApiEgress {
    return new AwsApiEgress('nat-gateway', [ec2.Peer.anyIpv4()]);
  }

  /** HTTPS to exactly these peers (endpoint security groups, managed prefix lists, CIDR blocks). */
  static peers(...peers: ec2.IPeer[]): AwsApiEgress {
    if (peers.length === 0) throw new Error('AwsApiEgress.peers: name at least one peer');
    return new AwsApiEgress('peers', peers);
  }

  private constructor(
    /** `vpc-endpoints`, `nat-gateway` or `peers`. */
    readonly kind: string,
    private readonly explicitPeers: ec2.IPeer[],
  ) {}

  /**
   * Adds the HTTPS egress rules to a security group of the VPC. With `vpcEndpoints()` and a VPC
   * created in the app, synth fails on the group's owner when the VPC lacks an interface endpoint
   * the platform calls (docs/deploy.md, "What synth checks, and what only a deployment shows");
   * an imported VPC's endpoints are not visible to synth.
   */
  applyTo(securityGroup: ec2.ISecurityGroup, vpc: ec2.IVpc): void {
    const peers = this.kind === 'vpc-endpoints' ? [ec2.Peer.ipv4(vpc.vpcCidrBlock)] : this.explicitPeers;
    for (const peer of peers) securityGroup.addEgressRule(peer, ec2.Port.tcp(443), `HTTPS to AWS APIs (${this.kind})`);
    if (this.kind === 'vpc-endpoints' && vpc instanceof ec2.Vpc) checkEndpointsOnce(securityGroup.node.scope ?? securityGroup, vpc);
  }
}

function checkEndpointsOnce(owner: IConstruct, vpc: ec2.Vpc): void {
  const vpcs = checked.get(owner) ?? new Set<ec2.IVpc>();
  checked.set(owner, vpcs);
  if (vpcs.has(vpc)) return;
  vpcs.add(vpc);
  owner.node.addValidation({ validate: () => missingEndpointErrors(vpc) });
}

/** An endpoint's service name as text, any token in it (the region) as `*`: `com.amazonaws.*.kinesis-streams`. */
function serviceNameText(endpoint: ec2.CfnVPCEndpoint): string {
  const text = (value: unknown): string => {
    if (typeof value === 'string') return value;
    const join = (value as { 'Fn::Join'?: [string, unknown[]] } | undefined)?.['Fn::Join'];
    return join ? join[1].map(text).join(join[0]) : '*';
  };
  return text(Stack.of(endpoint).resolve(endpoint.serviceName));
}

/** The APIs without an interface endpoint in the VPC, as one error naming them and the fixes (none when all are there). */
function missingEndpointErrors(vpc: ec2.Vpc): string[] {
  const endpoints = vpc.node.root.node.findAll().filter((c): c is ec2.CfnVPCEndpoint => c instanceof ec2.CfnVPCEndpoint && c.vpcId === vpc.vpcId);
  const names = endpoints.filter((e) => e.vpcEndpointType === 'Interface').map(serviceNameText);
  const hasInterface = (suffix: string) => names.some((name) => name.endsWith(`.${suffix}`));
  const missing = AWS_APIS_CALLED_FROM_THE_VPC.filter((a) => !hasInterface(a.suffix));
  if (missing.length === 0) return [];
  return [
    `awsApiEgress is AwsApiEgress.vpcEndpoints() (the default: HTTPS to the VPC's CIDR block only), but VPC ${vpc.node.path} has no interface endpoint for ` +
      `${missing.map((a) => `${a.api} (com.amazonaws.<region>.${a.suffix})`).join(', ')}, so these calls could not leave the VPC. ` +
      'Pass awsApiEgress: AwsApiEgress.natGateway() for subnets with a NAT route, or create the interface endpoints with private DNS in this VPC ' +
      '(vpc.addInterfaceEndpoint; a gateway endpoint for S3 or DynamoDB is reached only through AwsApiEgress.peers with its prefix list).',
  ];
}
