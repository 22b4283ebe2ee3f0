/**
 * Reads of an accepted plain TCP connection into memory the broker chooses (docs/architecture.md,
 * "Broker", frame memory). Node's own reads allocate a fresh 64 KiB buffer each, and a produce frame that
 * spans several reads is then copied together: at 1 KiB records that copy and the scavenges the buffers
 * start (V8's external memory pressure) were most of what the broker spent beyond the relay. With
 * `onread` a FrameReader says where each read lands, so a large frame is read straight into a buffer of
 * its own from the frame pool.
 *
 * Node offers `onread` only to sockets a process creates, not to those a server accepts. So the server
 * accepts paused (`pauseOnConnect`) and the connection goes on in a new net.Socket built on the accepted
 * one's handle with `onread`, as net.Server builds its own sockets on a handle. Where that handle is not
 * what it expects (another runtime, a later Node), the accepted socket reads as before.
 */
import net from 'node:net';
import { FrameReader } from 'tributary-protocol/frame-reader.js';
import { MAX_POOLED_FRAME, MIN_POOLED_FRAME } from '../storage/frame-pool.js';

/** A large frame read straight into its own buffer of frame pool memory from this size (frame-pool.ts). */
export const DIRECT_READ_MIN_BROKER = 16 * 1024;

/** The read buffer a connection keeps for headers and smaller frames: one such frame whole, and its header. */
const READ_BUFFER_BYTES = DIRECT_READ_MIN_BROKER + 4;

/** One accepted connection's reads: the reader, and where they go once the connection exists. */
export interface DirectReads {
  readonly reader: FrameReader;
  /** `n` bytes landed in the reader's last buffer(); false stops reading. Unset: nothing takes them yet. */
  onRead: ((n: number) => boolean) | undefined;
  /** The largest frame the connection takes now (before authentication, a small one; 0 while it reads no more). */
  limit: (() => number) | undefined;
}

interface StreamHandle {
  readStart(): number;
  readStop(): number;
  useUserBuffer(buf: Uint8Array): void;
}

function isStreamHandle(h: unknown): h is StreamHandle {
  if (typeof h !== 'object' || h === null) return false;
  const o = h as Record<string, unknown>;
  return typeof o.readStart === 'function' && typeof o.readStop === 'function' && typeof o.useUserBuffer === 'function';
}

type Internals = { _handle: unknown; server: unknown; _server: unknown };

/**
 * The connection `accepted` (from a server with `pauseOnConnect`, not read yet) as a socket reading
 * through `reads`, or undefined when that cannot be done: the caller then resumes `accepted` and reads
 * its 'data' events.
 */
export function adoptDirectReads(accepted: net.Socket, reads: DirectReads): net.Socket | undefined {
  const old = accepted as unknown as Internals;
  const handle = old._handle;
  if (!isStreamHandle(handle) || accepted.destroyed) return undefined;
  const opts = {
    handle,
    readable: true,
    writable: true,
    // Started once the server's count of connections is moved over: a start that fails destroys the
    // socket, which must give the count back.
    manualStart: true,
    onread: {
      buffer: () => reads.reader.buffer(reads.limit?.() ?? 0),
      // Before the connection is set up (or once refused), nothing reads: the bytes wait in the kernel.
      callback: (n: number) => (reads.onRead === undefined ? false : reads.onRead(n)),
    },
  } as net.SocketConstructorOpts;
  const socket = new net.Socket(opts);
  // The accepted socket is left without its handle, as if it never existed: the server's connection
  // count moves to the new one, which gives it back when it closes.
  const now = socket as unknown as Internals;
  now.server = old.server;
  now._server = old._server;
  old._handle = null;
  old.server = null;
  old._server = null;
  socket.read(0);
  return socket;
}

/**
 * The FrameReader of a broker connection: frames of 16 KiB to about 1 MiB straight into `alloc` (the frame
 * pool), and from 4 KiB (the pool's smallest) copied out of the read buffer into it. A larger one is read through the read buffer as its bytes come: a body allocated on its header
 * alone would let a client that sends only headers make the broker allocate the maximum frame on every
 * connection.
 */
export function brokerFrameReader(maxFrameBytes: number, alloc: ((bytes: number) => Buffer) | undefined): FrameReader {
  return new FrameReader(maxFrameBytes, DIRECT_READ_MIN_BROKER, READ_BUFFER_BYTES, alloc, MAX_POOLED_FRAME, MIN_POOLED_FRAME);
}
