/** A resolved CloudFormation value as cdk-nag names it in a finding (`<Logical.Arn>`, `<AWS::Region>`). */
export function nagText(v: unknown): string {
  if (typeof v === 'string') return v;
  if (typeof v === 'object' && v !== null) {
    const o = v as Record<string, unknown>;
    if (typeof o.Ref === 'string') return `<${o.Ref}>`;
    const att = o['Fn::GetAtt'];
    if (Array.isArray(att)) return `<${att.join('.')}>`;
    const join = o['Fn::Join'];
    if (Array.isArray(join) && typeof join[0] === 'string' && Array.isArray(join[1])) return (join[1] as unknown[]).map(nagText).join(join[0]);
  }
  return JSON.stringify(v);
}
