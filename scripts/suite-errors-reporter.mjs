// A vitest reporter that keeps what the JSON reporter drops: errors thrown by a file or a suite hook
// (beforeAll, afterAll) rather than by a test. scripts/test.mjs prints them with the failing file, so a
// log cut to its tail still says why a file whose tests were all skipped failed.
import { writeFileSync } from 'node:fs';

export default class SuiteErrorsReporter {
  onTestRunEnd(testModules, unhandledErrors) {
    const out = process.env.TRIBUTARY_SUITE_ERRORS;
    if (!out) return;
    // A stack starts with the message; the message alone where there is none.
    const text = (e, where = '') => `${where}${e.stack ?? e.message}`;
    const files = {};
    for (const m of testModules) {
      const errors = m.errors().map((e) => text(e));
      for (const s of m.children.allSuites()) for (const e of s.errors()) errors.push(text(e, `in "${s.fullName}": `));
      if (errors.length > 0) files[m.moduleId] = errors;
    }
    writeFileSync(out, JSON.stringify({ files, unhandled: unhandledErrors.map((e) => text(e)) }));
  }
}
