export * from './captured-table.ts';
export * from './cdc-source.ts';
export * from './change-log.ts';
export * from './control-plane.ts';
export * from './dms-service-roles.ts';
export * from './source-database.ts';
export * from './warehouse-connection.ts';
export * from './warehouse-sink.ts';
