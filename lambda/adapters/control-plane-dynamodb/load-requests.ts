/**
 * A Redshift sink's load requests in the control table (docs/warehouse-apply.md, "Redshift: the
 * applier"), partition `LOADREQ#<sink>`:
 *
 * | sk                      | item                                                                 |
 * |-------------------------|----------------------------------------------------------------------|
 * | `REQ#<request id>`      | a load request: `state`, its tables and objects (JSON in `body`), `deadline`, the claim, the outcome |
 * | `TABLE#<schema>.<view>` | the newest definition of a table the loader loaded (JSON in `body`, `schemaVersion`), for its merges |
 * | `MERGE`                 | when the loader last merged (`at`, epoch ms)                           |
 *
 * Every change of a request's state is a conditional update on the state it comes from, so of two
 * writers exactly one moves it. The applier deletes its request once it has its answer; the loader
 * deletes answered requests an applier left behind.
 */
import { ConditionalCheckFailedException, DeleteItemCommand, PutItemCommand, UpdateItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ControlPartition } from '../../../contracts/control-plane-keys.ts';
import type { LoadRequest, LoadRequestState, RequestTable } from '../../core/warehouse/redshift-requests.ts';
import type { RedshiftTable } from '../../core/warehouse/redshift-sql.ts';
import { ControlTable, toItem, type Plain } from './control-table.ts';

const REQ = 'REQ#';
const TABLE = 'TABLE#';

export class DynamoDbLoadRequests {
  private readonly t: ControlTable;
  private readonly pk: string;

  constructor(
    private readonly client: DynamoDBClient,
    private readonly tableName: string,
    readonly sinkId: string,
  ) {
    this.t = new ControlTable(client, tableName);
    this.pk = ControlPartition.loadRequests(sinkId);
  }

  private key(sk: string): { pk: string; sk: string } {
    return { pk: this.pk, sk };
  }

  /** Writes a new request (refused if its id exists). */
  async put(r: LoadRequest): Promise<void> {
    const { tables, sinkId: _sink, requestId, ...rest } = r;
    await this.client.send(
      new PutItemCommand({
        TableName: this.tableName,
        Item: toItem({ ...this.key(REQ + requestId), requestId, ...rest, body: JSON.stringify(tables) }),
        ConditionExpression: 'attribute_not_exists(pk)',
      }),
    );
  }

  async get(requestId: string): Promise<LoadRequest | null> {
    const item = await this.t.get(this.key(REQ + requestId));
    return item ? this.fromItem(item) : null;
  }

  /** Every request of the sink, in id order. */
  async list(): Promise<LoadRequest[]> {
    return (await this.t.query({ pk: this.pk, skPrefix: REQ })).map((i) => this.fromItem(i));
  }

  /** Moves a request from one of `from` to `to` with `set`; false when its state was none of them (another writer moved it). */
  async move(
    requestId: string,
    from: readonly LoadRequestState[],
    to: LoadRequestState,
    set: Partial<Pick<LoadRequest, 'claimedAt' | 'claimedBy' | 'loadId' | 'reason' | 'sqlState' | 'failedTable'>> = {},
  ): Promise<boolean> {
    const names: Record<string, string> = { '#state': 'state' };
    const values: Plain = { ':to': to };
    const sets = ['#state = :to'];
    for (const [k, v] of Object.entries(set)) {
      if (v === undefined) continue;
      names[`#${k}`] = k;
      values[`:${k}`] = v;
      sets.push(`#${k} = :${k}`);
    }
    from.forEach((f, i) => (values[`:from${i}`] = f));
    try {
      await this.client.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: toItem(this.key(REQ + requestId)),
          UpdateExpression: `SET ${sets.join(', ')}`,
          ConditionExpression: `attribute_exists(pk) AND #state IN (${from.map((_, i) => `:from${i}`).join(', ')})`,
          ExpressionAttributeNames: names,
          ExpressionAttributeValues: toItem(values),
        }),
      );
      return true;
    } catch (e) {
      if (e instanceof ConditionalCheckFailedException) return false;
      throw e;
    }
  }

  async delete(requestId: string): Promise<void> {
    await this.client.send(new DeleteItemCommand({ TableName: this.tableName, Key: toItem(this.key(REQ + requestId)) }));
  }

  /** Records a table's definition unless a newer schema version of it is recorded. */
  async putTable(table: RedshiftTable, schemaVersion: number): Promise<void> {
    const id = `${table.t.schema}.${table.t.view}`.toLowerCase();
    try {
      await this.client.send(
        new PutItemCommand({
          TableName: this.tableName,
          Item: toItem({ ...this.key(TABLE + id), body: JSON.stringify(table), schemaVersion }),
          ConditionExpression: 'attribute_not_exists(pk) OR schemaVersion <= :v',
          ExpressionAttributeValues: toItem({ ':v': schemaVersion }),
        }),
      );
    } catch (e) {
      if (!(e instanceof ConditionalCheckFailedException)) throw e;
    }
  }

  /** The tables the loader has loaded, as last recorded. */
  async tables(): Promise<RedshiftTable[]> {
    return (await this.t.query({ pk: this.pk, skPrefix: TABLE })).map((i) => JSON.parse(String(i.body)) as RedshiftTable);
  }

  async lastMergeAt(): Promise<number | null> {
    const item = await this.t.get(this.key('MERGE'));
    return item ? Number(item.at) : null;
  }

  async setMergeAt(at: number): Promise<void> {
    await this.client.send(new PutItemCommand({ TableName: this.tableName, Item: toItem({ ...this.key('MERGE'), at }) }));
  }

  private fromItem(i: Plain): LoadRequest {
    const opt = <K extends keyof LoadRequest>(k: K): Partial<LoadRequest> => (i[k] === undefined ? {} : { [k]: i[k] as LoadRequest[K] });
    return {
      sinkId: this.sinkId,
      requestId: String(i.requestId),
      state: i.state as LoadRequestState,
      tables: JSON.parse(String(i.body)) as RequestTable[],
      createdAt: Number(i.createdAt),
      deadline: Number(i.deadline),
      ...opt('claimedAt'),
      ...opt('claimedBy'),
      ...opt('loadId'),
      ...opt('reason'),
      ...opt('sqlState'),
      ...opt('failedTable'),
    };
  }
}
