/**
 * Headless Chromium for the tests of pages `cdc local` serves (docs/local.md, "The status page").
 * CI installs Debian's `chromium` (.ci/run), so a missing browser is an error, never a skip.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** The browser: `CHROMIUM` if set, else the first of Debian's and others' usual names on PATH. */
export function chromiumPath(): string {
  if (process.env.CHROMIUM) {
    if (!existsSync(process.env.CHROMIUM)) throw new Error(`CHROMIUM is ${process.env.CHROMIUM}, which does not exist`);
    return process.env.CHROMIUM;
  }
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
      if (dir && existsSync(path.join(dir, name))) return path.join(dir, name);
    }
  }
  throw new Error('headless Chromium not found on PATH (nor CHROMIUM set): install it with `apt-get install -y chromium` (CI does, in .ci/run)');
}

/**
 * Opens `url` in headless Chromium, lets its scripts run for `budgetMs` of virtual time (pending
 * fetches hold the clock, so a page that draws from its data has drawn), and returns the DOM then.
 */
export async function renderedDom(url: string, budgetMs = 5000): Promise<string> {
  const profile = await mkdtemp(path.join(os.tmpdir(), 'cdc-chromium-'));
  try {
    const args = [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-dev-shm-usage',
      '--no-first-run',
      `--user-data-dir=${profile}`,
      `--virtual-time-budget=${budgetMs}`,
      '--dump-dom',
      url,
    ];
    return await new Promise<string>((resolve, reject) => {
      execFile(chromiumPath(), args, { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 }, (e, stdout, stderr) => {
        if (e) reject(new Error(`chromium --dump-dom ${url} failed: ${e.message}\n${stderr}`));
        else resolve(stdout);
      });
    });
  } finally {
    await rm(profile, { recursive: true, force: true });
  }
}
