#!/usr/bin/env node
// The `cdc` command. The CLI is written in TypeScript; tsx compiles it on the fly, so the package
// runs from its sources with no build step. Subcommands live in bin/cli/.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('./cli/main.ts');
process.exitCode = await main(process.argv.slice(2));
