import * as ec2 from 'aws-cdk-lib/aws-ec2';

/**
 * Where the platform's resources in the VPC (the DMS replication instance, the database-facing
 * functions, the warehouse applier) may send HTTPS to reach AWS APIs (Kinesis, Secrets Manager,
 * DMS, DynamoDB, the CloudFormation response URL in S3). Their security groups allow nothing else
 * outbound except the database or warehouse port (docs/deploy.md, "Network").
 */
export class AwsApiEgress {
  /**
   * Through interface VPC endpoints in the VPC: HTTPS to the VPC's CIDR block only. The
   * endpoints (Kinesis, Secrets Manager, DMS, DynamoDB, S3) are yours to create.
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

  /** Adds the HTTPS egress rules to a security group of the VPC. */
  applyTo(securityGroup: ec2.ISecurityGroup, vpc: ec2.IVpc): void {
    const peers = this.kind === 'vpc-endpoints' ? [ec2.Peer.ipv4(vpc.vpcCidrBlock)] : this.explicitPeers;
    for (const peer of peers) securityGroup.addEgressRule(peer, ec2.Port.tcp(443), `HTTPS to AWS APIs (${this.kind})`);
  }
}
