/** The `tributary` CLI run in the test's own process, its output captured: for cases that start no broker. */
import { vi } from 'vitest';
import { run } from 'tributary-broker/cli/program.js';

export async function cliInProcess(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stdout += String(chunk);
    return true;
  });
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  });
  try {
    return { code: await run(['node', 'tributary', ...args]), stdout, stderr };
  } finally {
    vi.restoreAllMocks();
  }
}
