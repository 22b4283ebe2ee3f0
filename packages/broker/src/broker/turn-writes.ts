/**
 * The main port's replies leave once per turn of the event loop (docs/architecture.md, "Broker"): the
 * first reply a connection writes in a turn corks its socket, and in the loop's check phase, after every
 * I/O callback of the poll phase ran, each socket corked this turn is uncorked, so replies completed
 * together leave in one `writev` per connection.
 *
 * Sockets that carry only produce acknowledgements this turn are uncorked last. A write wakes its peer,
 * and the first woken gets the idle core: when one fsync answers an append and the long poll waiting for
 * it, the consumer's delivery, which ends a record's end-to-end latency, should not queue behind the
 * producer handling its ack. The ack leaves a few microseconds later, in the same check phase.
 */

/** What TurnWrites needs of a socket. */
export interface Corkable {
  cork(): void;
  uncork(): void;
}

/** Commands whose reply is a produce acknowledgement (binary batches are labelled BATCH, TXN_PUBLISH or TXN_APPEND). */
export const PRODUCE_ACKS: ReadonlySet<string> = new Set(['BATCH', 'PUBLISH', 'TXN_PUBLISH', 'TXN_APPEND']);

export class TurnWrites {
  /** Sockets corked this turn, each with whether it carries anything but produce acknowledgements. */
  private corked = new Map<Corkable, boolean>();
  private armed = false;

  /** `onError`: a socket whose uncork threw (the others are still uncorked). */
  constructor(private readonly onError: (err: unknown) => void) {}

  /** Before a reply is written to `socket`: corks it for the rest of the turn. `ack`: the reply is a produce acknowledgement. */
  corkFor(socket: Corkable, ack: boolean): void {
    const delivers = this.corked.get(socket);
    if (delivers === undefined) {
      socket.cork();
      this.corked.set(socket, !ack);
      if (!this.armed) {
        this.armed = true;
        setImmediate(this.flush);
      }
    } else if (!delivers && !ack) this.corked.set(socket, true);
  }

  private readonly flush = (): void => {
    this.armed = false;
    // A fresh map first: a reply written while uncorking (none is, today) corks for the next turn.
    const corked = this.corked;
    this.corked = new Map();
    for (const [socket, delivers] of corked) if (delivers) this.uncork(socket);
    for (const [socket, delivers] of corked) if (!delivers) this.uncork(socket);
  };

  private uncork(socket: Corkable): void {
    try {
      socket.uncork();
    } catch (err) {
      try {
        this.onError(err);
      } catch {
        // A failing report must not leave the turn's later sockets corked for good.
      }
    }
  }
}
