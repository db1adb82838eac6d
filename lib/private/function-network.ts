/**
 * One security group per function in the VPC, sending only where that function needs to
 * (docs/deploy.md, "Network"): HTTPS to AWS APIs (`AwsApiEgress`), and the port of each database
 * it talks to, to that database's security group or address range. A function that reaches no
 * database gets no database rule.
 */
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type { Construct, IConstruct, IDependable } from 'constructs';
import type { AwsApiEgress } from '../aws-api-egress.ts';
import { WarehouseConnection } from '../warehouse-connection.ts';
import { checkIntegerRange, fail } from './validate.ts';

/** A security group that allows nothing outbound but HTTPS to AWS APIs. */
export function ownSecurityGroup(scope: Construct, id: string, vpc: ec2.IVpc, awsApiEgress: AwsApiEgress, description: string): ec2.SecurityGroup {
  const securityGroup = new ec2.SecurityGroup(scope, id, { vpc, description, allowAllOutbound: false });
  awsApiEgress.applyTo(securityGroup, vpc);
  return securityGroup;
}

/**
 * A database a function talks to: its security group or its address range (whichever the
 * construct was given; docs/deploy.md, "Network") and port.
 */
export interface DatabasePeer {
  readonly securityGroup?: ec2.ISecurityGroup;
  readonly peer?: ec2.IPeer;
  readonly port: number;
}

/**
 * Fails synth when the database is named neither by its security group nor by its address:
 * no rule would open its port, and the groups of this library send nowhere else.
 * The message names the call that takes the option (`SourceDatabase.postgres`); `what` is the database.
 */
export function requireDatabasePeer(scope: IConstruct, database: DatabasePeer, what: string): void {
  if (database.securityGroup || database.peer) return;
  const factory = database instanceof WarehouseConnection ? `WarehouseConnection.${database.engine}` : 'SourceDatabase.postgres';
  fail(
    scope,
    `nothing names ${what}'s network, so no rule would open port ${database.port} to it and the security groups here send nowhere else. ` +
      `Pass ${factory}({ …, securityGroup }) with the database's security group (adds the ingress rule there and the egress rule here), ` +
      `or ${factory}({ …, peer: ec2.Peer.ipv4('10.0.0.0/24') }) with its address range (the egress rule only; the database's side admits these groups)`,
  );
}

/**
 * Lets `from` send to the database on its port, TCP only (`<id>Egress`, described `who: to what`),
 * and, when the database has a security group, admits `from` there (`<id>Ingress`, described
 * `who`). Returns the rules (for dependencies); fails synth when nothing names the database.
 */
export function allowDatabase(scope: Construct, id: string, from: ec2.ISecurityGroup, database: DatabasePeer, who: string, what: string): IDependable[] {
  requireDatabasePeer(scope, database, what);
  checkIntegerRange(scope, `port of ${what}`, database.port, 1, 65535);
  const port = { ipProtocol: 'tcp', fromPort: database.port, toPort: database.port };
  if (!database.securityGroup) {
    const to = database.peer!.toEgressRuleConfig() as Partial<ec2.CfnSecurityGroupEgressProps>;
    return [
      new ec2.CfnSecurityGroupEgress(scope, `${id}Egress`, { groupId: from.securityGroupId, ...to, ...port, description: `${who}: to ${what}`.slice(0, 255) }),
    ];
  }
  const ingress = new ec2.CfnSecurityGroupIngress(scope, `${id}Ingress`, {
    groupId: database.securityGroup.securityGroupId,
    sourceSecurityGroupId: from.securityGroupId,
    ...port,
    description: who.slice(0, 255),
  });
  const egress = new ec2.CfnSecurityGroupEgress(scope, `${id}Egress`, {
    groupId: from.securityGroupId,
    destinationSecurityGroupId: database.securityGroup.securityGroupId,
    ...port,
    description: `${who}: to ${what}`.slice(0, 255),
  });
  return [ingress, egress];
}
