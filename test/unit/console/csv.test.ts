/**
 * The console's CSV export (packages/broker/console/src/csv.ts) under Node: no cell starts with a
 * character a spreadsheet reads as a formula (= + - @, tab, carriage return: OWASP's CSV injection page;
 * NUL: ASVS 5.0 1.2.10), each guarded cell has exactly one ' added (a value that starts with ' gets one
 * too), cells are quoted per RFC 4180, each key and value says its encoding, and the file parses back to
 * the messages. test/integration/console.test.ts downloads the same export from a real page.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CSV_COLUMNS, type CsvMessage, csvCell, isoTimestamp, toCsv } from '../../../packages/broker/console/src/csv.js';
import { expectRowsGiveBack, parseCsv } from '../../helpers/csv.js';

const FORMULA_START = /^[=+\-@\t\r\0]/;

function message(over: Partial<CsvMessage>): CsvMessage {
  return { partition: 0, offset: 0, timestamp: Date.UTC(2026, 0, 2, 3, 4, 5, 6), key: null, keyEncoding: 'utf8', value: '', valueEncoding: 'utf8', headers: [], ...over };
}


describe('csvCell', () => {
  it('puts a quote before a cell that starts with a formula character, or with a quote', () => {
    for (const v of ['=1+2', '+41 22', '-2', '@SUM(A1)', '\tTAB', '\rCR', '\0NUL', "'quoted"]) expect(parseCsv(`${csvCell(v)}\n`)).toEqual([[`'${v}`]]);
    expect(csvCell('=HYPERLINK("http://attacker.example/","open")')).toBe('"\'=HYPERLINK(""http://attacker.example/"",""open"")"');
    expect(csvCell('@me')).toBe("'@me");
    expect(csvCell('-1')).toBe("'-1");
    expect(csvCell("'x")).toBe("''x");
    expect(csvCell('\rCR')).toBe(`"'\rCR"`);
  });

  it('leaves other cells as they are, quoting only those with a quote, comma or line end', () => {
    expect(csvCell('plain')).toBe('plain');
    expect(csvCell('')).toBe('');
    expect(csvCell('a=b')).toBe('a=b');
    expect(csvCell(' =not first')).toBe(' =not first');
    expect(csvCell('one, "two"\nthree')).toBe('"one, ""two""\nthree"');
  });
});

describe('toCsv', () => {
  it('has a header row naming the encoding columns, and one row per message', () => {
    const csv = toCsv([
      message({ partition: 1, offset: 7, key: 'k', value: 'v', headers: [{ key: 'trace', value: '-1', encoding: 'utf8' }] }),
      // Bytes that are not UTF-8 (fb ef be) are base64 "++++": guarded, and said to be base64.
      message({ offset: 8, key: '', value: '++++', valueEncoding: 'base64' }),
      message({ offset: 9, key: '/w==', keyEncoding: 'base64', value: '=1+2' }),
    ]);
    expect(csv.split('\n')).toEqual([
      'partition,offset,timestamp,key,keyEncoding,value,valueEncoding,headers',
      '1,7,2026-01-02T03:04:05.006Z,k,utf8,v,utf8,"[{""key"":""trace"",""value"":""-1"",""encoding"":""utf8""}]"',
      // A null key has empty key and encoding cells; an empty key is utf8.
      "0,8,2026-01-02T03:04:05.006Z,,utf8,'++++,base64,[]",
      "0,9,2026-01-02T03:04:05.006Z,/w==,base64,'=1+2,utf8,[]",
      '',
    ]);
    expect(toCsv([])).toBe(`${CSV_COLUMNS.join(',')}\n`);
    expect(toCsv([message({})]).split('\n')[1]).toBe('0,0,2026-01-02T03:04:05.006Z,,,,utf8,[]');
  });

  it('a record without a timestamp (-1) or with one no Date holds has an empty timestamp cell instead of a throw', () => {
    expect(toCsv([message({ timestamp: -1 }), message({ timestamp: 9e15 })]).split('\n').slice(1, 3)).toEqual(['0,0,,,,,utf8,[]', '0,0,,,,,utf8,[]']);
    expect([isoTimestamp(-1), isoTimestamp(9e15), isoTimestamp(0)]).toEqual([null, null, '1970-01-01T00:00:00.000Z']);
  });

  it('any messages: no cell starts with a formula character, and removing one leading quote gives each message back', () => {
    const text = fc.string({ unit: fc.constantFrom('=', '+', '-', '@', '\t', '\r', '\n', '\0', "'", '"', ',', 'a', ' ', '\u2028', 'é') });
    const encoding = fc.constantFrom<'utf8' | 'base64'>('utf8', 'base64');
    const msg = fc.record({
      partition: fc.nat({ max: 1000 }),
      offset: fc.nat(),
      timestamp: fc.integer({ min: 0, max: 4_102_444_800_000 }),
      key: fc.option(text, { nil: null }),
      keyEncoding: encoding,
      value: text,
      valueEncoding: encoding,
      headers: fc.array(fc.record({ key: text, value: text, encoding }), { maxLength: 3 }),
    });
    fc.assert(
      fc.property(fc.array(msg, { maxLength: 5 }), (messages) => {
        const rows = parseCsv(toCsv(messages));
        expect(rows[0]).toEqual([...CSV_COLUMNS]);
        expect(rows.length).toBe(messages.length + 1);
        for (const cell of rows.flat()) expect(cell).not.toMatch(FORMULA_START);
        expectRowsGiveBack(rows.slice(1), messages);
      }),
      { numRuns: 300 },
    );
  });
});
