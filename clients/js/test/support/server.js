// Starts the real `agent-runtime serve` binary (path in AGENT_RUNTIME_BIN) on a free port with a
// private data directory, and reads the URL and development token it prints.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export async function startServer(configToml = '') {
  const binary = process.env.AGENT_RUNTIME_BIN;
  if (!binary) throw new Error('AGENT_RUNTIME_BIN must name the agent-runtime binary');
  const dir = mkdtempSync(join(tmpdir(), 'agent-client-test-'));
  const config = join(dir, 'config.toml');
  writeFileSync(config, configToml);
  const child = spawn(binary, ['serve', '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'data'), '--config', config], {
    env: { ...process.env, AGENT_RUNTIME_LOG: 'warn' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  let url;
  let token;
  for await (const line of lines) {
    const served = line.match(/^agent-runtime is serving on (\S+)/);
    if (served) url = served[1];
    const printed = line.match(/^\s*token:\s*(\S+)/);
    if (printed) token = printed[1];
    if (url && token) break;
  }
  if (!url || !token) throw new Error('the server did not print its URL and token');
  // Keep draining stdout so the server never blocks on a full pipe.
  lines.on('line', () => {});
  return {
    url,
    token,
    baseUrl: `${url}/v1/agent`,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
