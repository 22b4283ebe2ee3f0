/**
 * Imported first by the CLI entry (main.ts), before anything touches the disk: libuv's thread pool, which
 * runs every file operation, is sized when first used. Recovery opens thousands of partitions with a few
 * files and fsyncs each; four threads (Node's default) leave them queuing (docs/operations.md, "Limits").
 * An explicit UV_THREADPOOL_SIZE wins.
 */
process.env.UV_THREADPOOL_SIZE ??= '16';
