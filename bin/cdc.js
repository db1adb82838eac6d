#!/usr/bin/env node
// The `cdc` command. The CLI is written in TypeScript; tsx compiles it on the fly, so the package
// runs from its sources with no build step. Subcommands live in bin/cli/.
import { register } from 'tsx/esm/api';

// The AWS SDK versions in package.json are pinned to releases that support Node 20; the SDK's
// warning that *later* releases will need Node 22 says nothing about them, and it would otherwise
// land on stderr of every command that loads a client (stderr is where `cdc decode` reports bad lines).
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

register();
const { main } = await import('./cli/main.ts');
process.exitCode = await main(process.argv.slice(2));
