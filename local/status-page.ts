/**
 * The live status of `cdc local` as a web page on 127.0.0.1 (docs/local.md, "The status page"): the
 * facts the terminal status shows (local/status.ts) as panels, with lag and rates over time. One
 * self-contained HTML page (inline style and script, no external assets) that reads
 * `/status.json` every two seconds; `/status.json` is the latest `StatusSnapshot` plus a short
 * history of the numbers drawn over time.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { STATUS_PAGE_HTML } from './status-page-html.ts';
import { POLL_DELETES_INVISIBLE } from '../lambda/core/capture/poll.ts';
import { explainThrottle, type StatusSnapshot } from './status.ts';

/** The port tried first; when it is taken, the system picks a free one (the URL is printed either way). */
export const STATUS_PAGE_PORT = 4780;

/** One reading of the numbers the page draws over time. */
export interface StatusPoint {
  at: number;
  captureRecordsPerSecond: number;
  sinks: Array<{ sink: string; lagMs: number | null; lagP99Ms: number | null; eventsPerSecond: number }>;
}

/** What `/status.json` serves. */
export interface StatusPageBody {
  status: StatusSnapshot | null;
  history: StatusPoint[];
  /** Per snapshot table, what its throttle state means (as the terminal says it). */
  throttle: Record<string, string>;
  /** What a polled table's capture cannot see (docs/polling.md). */
  pollNote: string;
  /** What a bounded run is doing after time is up (draining: what is left per sink; comparing; the bound reached), or null while it runs. */
  phase: string | null;
}

export interface StatusPageOptions {
  /** @default STATUS_PAGE_PORT, then any free port */
  port?: number;
  /** How much history the page draws, ms. @default 10 minutes */
  historyMs?: number;
}

/** The status page's server: `show` gives it each new status, `url` says where it is. */
export class StatusPage {
  private latest: StatusSnapshot | null = null;
  private phase: string | null = null;
  private readonly history: StatusPoint[] = [];
  private readonly historyMs: number;

  private constructor(
    private readonly server: http.Server,
    readonly url: string,
    options: StatusPageOptions,
  ) {
    this.historyMs = options.historyMs ?? 10 * 60_000;
  }

  /** Listens on 127.0.0.1 (only this machine can read the page). */
  static async start(options: StatusPageOptions = {}): Promise<StatusPage> {
    const server = http.createServer();
    const port = await listen(server, options.port ?? STATUS_PAGE_PORT).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'EADDRINUSE' || options.port !== undefined)
        throw new Error(`the status page could not listen on 127.0.0.1:${options.port ?? STATUS_PAGE_PORT}: ${e.message}`);
      return listen(server, 0);
    });
    const page = new StatusPage(server, `http://127.0.0.1:${port}/`, options);
    server.on('request', (req, res) => page.handle(req, res));
    return page;
  }

  /** Records a status for the page and returns it unchanged (so it can sit in the status pipeline). */
  show(s: StatusSnapshot): StatusSnapshot {
    this.latest = s;
    this.history.push({
      at: s.now,
      captureRecordsPerSecond: s.capture.recordsPerSecond,
      sinks: s.sinks.map((k) => ({ sink: k.sink, lagMs: k.lagMs, lagP99Ms: k.lagP99Ms, eventsPerSecond: k.eventsPerSecond })),
    });
    while (this.history.length > 0 && this.history[0]!.at < s.now - this.historyMs) this.history.shift();
    return s;
  }

  /** Says what a bounded run is doing after time is up (the page shows it above the panels). */
  setPhase(text: string | null): void {
    this.phase = text;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve, reject) => this.server.close((e) => (e ? reject(e) : resolve())));
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const route = (req.url ?? '/').split('?')[0];
    // Only this machine's names: a page of another site whose name resolves to 127.0.0.1 (DNS rebinding) reads nothing.
    const host = req.headers.host ?? '';
    if (!/^(127\.0\.0\.1|localhost|\[::1\])(:\d+)?$/.test(host))
      return send(res, 421, 'text/plain; charset=utf-8', `host ${JSON.stringify(host)} is not served: open ${this.url}\n`);
    if (req.method !== 'GET' && req.method !== 'HEAD')
      return send(res, 405, 'text/plain; charset=utf-8', `${req.method} is not served: the status page is read-only\n`);
    if (route === '/' || route === '/index.html') return send(res, 200, 'text/html; charset=utf-8', STATUS_PAGE_HTML);
    if (route === '/status.json') {
      const throttle = Object.fromEntries(
        (this.latest?.snapshots ?? []).map((x) => [x.table, x.status === 'running' ? explainThrottle(x.throttle) : x.throttle]),
      );
      const body: StatusPageBody = { status: this.latest, history: this.history, throttle, pollNote: POLL_DELETES_INVISIBLE, phase: this.phase };
      return send(res, 200, 'application/json', JSON.stringify(body));
    }
    send(res, 404, 'text/plain; charset=utf-8', `no page at ${route}: the status page is / and its data /status.json\n`);
  }
}

function send(res: http.ServerResponse, code: number, type: string, body: string): void {
  res.writeHead(code, {
    'content-type': type,
    'cache-control': 'no-store',
    'content-security-policy': "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'",
  });
  res.end(body);
}

function listen(server: http.Server, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const fail = (e: Error): void => reject(e);
    server.once('error', fail);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', fail);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/**
 * Starts the status page for `cdc local` and prints its URL, or prints why there is none (the
 * terminal status is the same either way, so a page that cannot listen does not stop the run).
 */
export async function openStatusPage(print: (text: string) => void): Promise<StatusPage | null> {
  try {
    const page = await StatusPage.start();
    print(`cdc local: status page on ${page.url} (open it in a browser on this machine; it refreshes itself)\n`);
    return page;
  } catch (e) {
    print(`cdc local: no status page (${e instanceof Error ? e.message : String(e)}); the status below is the same\n`);
    return null;
  }
}

/** Gives `s` to the page, if there is one, and returns it (for the status's path to the terminal). */
export function showOnPage(page: StatusPage | null, s: StatusSnapshot): StatusSnapshot {
  return page ? page.show(s) : s;
}
