/**
 * One security group per function in the VPC, sending only where that function needs to
 * (docs/deploy.md, "Network"): HTTPS to AWS APIs (`AwsApiEgress`), and the port of each database
 * it talks to, to that database's security group. A function that reaches no database gets no
 * database rule.
 */
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type { Construct, IDependable } from 'constructs';
import type { AwsApiEgress } from '../aws-api-egress.ts';
import { checkIntegerRange } from './validate.ts';

/** A security group that allows nothing outbound but HTTPS to AWS APIs. */
export function ownSecurityGroup(scope: Construct, id: string, vpc: ec2.IVpc, awsApiEgress: AwsApiEgress, description: string): ec2.SecurityGroup {
  const securityGroup = new ec2.SecurityGroup(scope, id, { vpc, description, allowAllOutbound: false });
  awsApiEgress.applyTo(securityGroup, vpc);
  return securityGroup;
}

/** A database a function talks to: its security group (when the construct was given one) and port. */
export interface DatabasePeer {
  readonly securityGroup?: ec2.ISecurityGroup;
  readonly port: number;
}

/**
 * Admits `from` on the database's port and lets `from` send there, TCP on that port only
 * (`<id>Ingress`, described `who`; `<id>Egress`, `who: to what`). Returns both rules (for dependencies), or none when the database
 * has no security group (its owner admits `connections` on it).
 */
export function allowDatabase(scope: Construct, id: string, from: ec2.ISecurityGroup, database: DatabasePeer, who: string, what: string): IDependable[] {
  if (!database.securityGroup) return [];
  checkIntegerRange(scope, `port of ${what}`, database.port, 1, 65535);
  const ingress = new ec2.CfnSecurityGroupIngress(scope, `${id}Ingress`, {
    groupId: database.securityGroup.securityGroupId,
    sourceSecurityGroupId: from.securityGroupId,
    ipProtocol: 'tcp',
    fromPort: database.port,
    toPort: database.port,
    description: who.slice(0, 255),
  });
  const egress = new ec2.CfnSecurityGroupEgress(scope, `${id}Egress`, {
    groupId: from.securityGroupId,
    destinationSecurityGroupId: database.securityGroup.securityGroupId,
    ipProtocol: 'tcp',
    fromPort: database.port,
    toPort: database.port,
    description: `${who}: to ${what}`.slice(0, 255),
  });
  return [ingress, egress];
}
