/**
 * What one main-port connection has read and not yet answered (docs/protocol.md, "Connection limits"):
 * its requests (frames taken as requests, running or waiting their turn, whose replies are not written
 * yet) and the bytes read for them, with what is buffered of the next frames. While it is `full` the
 * connection takes no frame and does not read its socket (client-connection.ts) until replies went out.
 */

/** How many requests one connection may have unanswered; reading resumes once half of them were answered. */
export const MAX_IN_FLIGHT = 1024;
/**
 * How many bytes of requests one connection may have read and not answered while one of them is in
 * flight: 1024 pipelined frames of up to `--max-frame-bytes` each would be 64 GiB. One request alone is
 * always read whole, so a connection holds at most this, or one larger request, plus a socket read.
 */
export const MAX_PENDING_REQUEST_BYTES = 16 * 1024 * 1024;
/** A frame's length prefix, counted with its body. */
export const FRAME_PREFIX = 4;

export class RequestBudget {
  private requests = 0;
  private bytes = 0;
  /** MAX_IN_FLIGHT was reached: full until half of them were answered. */
  private countFull = false;
  private released = false;

  /** `gauge`: tributary_pending_request_bytes, every connection's bytes together. */
  constructor(private readonly gauge: { inc(n: number): void; dec(n: number): void }) {}

  /** At a limit: MAX_IN_FLIGHT requests, or MAX_PENDING_REQUEST_BYTES while a request is in flight. */
  get full(): boolean {
    return this.countFull || (this.requests > 0 && this.bytes >= MAX_PENDING_REQUEST_BYTES);
  }

  /** Bytes read from the socket. */
  read(n: number): void {
    if (this.released) return;
    this.bytes += n;
    this.gauge.inc(n);
  }

  /** A frame was taken as a request. */
  taken(): void {
    this.requests++;
    if (this.requests >= MAX_IN_FLIGHT) this.countFull = true;
  }

  /**
   * A frame's bytes (its prefix included) are no longer pending: its request's reply was written, or it
   * needed none (`request` false: a keepalive, a frame on an open stream, never taken as a request).
   */
  answered(frameBytes: number, request = true): void {
    if (request) {
      this.requests--;
      if (this.requests < MAX_IN_FLIGHT / 2) this.countFull = false;
    }
    if (this.released) return;
    this.bytes -= frameBytes;
    this.gauge.dec(frameBytes);
  }

  /** The connection closed: what it held is no longer the broker's. */
  release(): void {
    if (this.released) return;
    this.released = true;
    this.gauge.dec(this.bytes);
    this.bytes = 0;
  }
}
