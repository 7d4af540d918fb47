#!/usr/bin/env node
// The `powerinfer` command. A CommonJS entry, because libuv sizes the thread pool that serves
// reads from flash when it first starts, and Node's ES module loader starts it before any module
// code runs: the size has to be in the environment before that. The pool size is also the default
// number of direct reads in flight (src/io/thread-pool-backend.ts defaultQueueDepth).
"use strict";
if (!process.env.UV_THREADPOOL_SIZE) process.env.UV_THREADPOOL_SIZE = "64";
import("../dist/src/cli/main.js").catch((e) => {
  console.error(`powerinfer: ${e && e.message ? e.message : e}`);
  process.exitCode = 1;
});
