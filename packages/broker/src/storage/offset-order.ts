/** The offset order a segment's records keep, checked as a scan reads them (Segment). */
import { ATTR_END_OF_APPEND } from './record-codec.js';

/**
 * Offset order within a segment: offsets increase, the records of one append are consecutive, and
 * between appends there may be gaps (left by compaction). `exact` pins the first record's offset.
 */
export class OrderCheck {
  /** Lowest offset the next record may have. */
  next: number;
  /** The last accepted record did not end its append. */
  inAppend = false;
  constructor(
    from: number,
    private exact: boolean,
  ) {
    this.next = from;
  }
  /** A record, or an append block of offsets [offset, last] (block-records.ts). */
  accept(offset: number, attributes: number, last: number = offset): boolean {
    if (offset < this.next || (offset !== this.next && (this.inAppend || this.exact))) return false;
    this.exact = false;
    this.next = last + 1;
    this.inAppend = (attributes & ATTR_END_OF_APPEND) === 0;
    return true;
  }
}
