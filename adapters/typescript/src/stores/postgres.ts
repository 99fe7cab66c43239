/**
 * A `SessionStateStore` on PostgreSQL with `pg`.
 *
 * Tables (prefix `ts_reqkey_` by default, so they never meet the Rust
 * reference store's `reqkey_*` tables), created on start by `migrate()`:
 *
 *   PREFIXsessions (session_id PK)          one row per live session: the lock
 *   PREFIXruns     (session_id, run_id) PK  status, start_sequence, request_key,
 *                                           request_digest, start_digest, input
 *   unique (session_id, start_sequence)
 *   unique partial index (session_id, request_key) WHERE request_key IS NOT NULL
 *
 * The run-start commit is one transaction. It first upserts the session row
 * with `ON CONFLICT DO UPDATE`, which leaves that row locked by this
 * transaction (and re-creates it if a concurrent delete removed it), so
 * every commit of a session runs its reads (replay, key holder, CAS) and
 * its write one after another. The key holder is therefore read under the
 * session's row lock; the unique index is only a backstop, and if it ever
 * fires the commit rolls back and answers `request_key_taken` naming the
 * holder, never the raw unique violation. A refused commit rolls back, so
 * it does not even create the session.
 *
 * The input log is the runs' `input` column in `start_sequence` order: each
 * commit appends exactly one input, with its run. The column is `json`,
 * which keeps the text it is given, and the input goes in as
 * `stringifyJson` writes it (numbers as the client wrote them) and comes
 * out as text (`input::text`, never `pg`'s own JSON.parse) through
 * `parseJson`, so `1.50`, `-0`, `1e400` and `18446744073709551616` come
 * back as they went in.
 *
 * `broken` breaks it on purpose, to prove the suite catches it:
 * `no-key-rule` skips rule 2 (the holder read); the backstop still turns a
 * duplicate insert into `request_key_taken`, which is also how the tests
 * reach the backstop. `no-lock` creates the session row without locking
 * it, so commits of one session interleave (two read the same current run
 * and both insert the next start_sequence).
 */
import pg from "pg";
import { startDigest } from "../canonical.js";
import { parseJson, stringifyJson } from "../json.js";
import { InvalidArgumentError, InvalidTransitionError, NotFoundError, RunStartRejectedError } from "../errors.js";
import {
  type CommitRunStartResult,
  type InputRecord,
  LIVE_STATUSES,
  RUN_STATUSES,
  type RunMetadata,
  type RunStatus,
  type SessionStateStore,
  type StartRun,
  isFinished,
  isRunStatus,
} from "../types.js";

export type PostgresDefect = "no-key-rule" | "no-lock";
export const POSTGRES_DEFECTS: readonly PostgresDefect[] = ["no-key-rule", "no-lock"];

export const DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test";
export const DEFAULT_TABLE_PREFIX = "ts_reqkey_";

export interface PostgresStoreOptions {
  /** A connection string; default `DEFAULT_POSTGRES_URL`. */
  connectionString?: string;
  /** Table name prefix, `[a-z_][a-z0-9_]*`; default `ts_reqkey_`. */
  tablePrefix?: string;
  /** Pool size; default 16 (the race scenarios send 8 commits at once). */
  maxConnections?: number;
  /** Bound on every statement, in ms; default 10 000. */
  statementTimeoutMs?: number;
  broken?: PostgresDefect;
}

/** SQLSTATE of a unique violation. */
const UNIQUE_VIOLATION = "23505";
/** A commit that finds the backstop fired but the holder gone (deleted meanwhile) runs again, at most this often. */
const MAX_COMMIT_ATTEMPTS = 3;

interface RunRow {
  session_id: string;
  run_id: string;
  status: string;
  start_sequence: number;
  request_key: string | null;
  request_digest: string | null;
}

const RUN_COLUMNS = "session_id, run_id, status, start_sequence, request_key, request_digest";

/** A run as the store's type has it: key fields absent (not null) on a keyless run. */
function toRun(row: RunRow): RunMetadata {
  if (!isRunStatus(row.status)) throw new Error(`run ${row.run_id} has an unknown status in the table: ${row.status}`);
  const run: RunMetadata = { sessionId: row.session_id, runId: row.run_id, status: row.status, startSequence: row.start_sequence };
  if (row.request_key !== null) run.requestKey = row.request_key;
  if (row.request_digest !== null) run.requestDigest = row.request_digest;
  return run;
}

/** Postgres text cannot hold U+0000; refuse it as an argument rather than fail as a backend error. */
function storable(name: string, v: string): string {
  if (v.includes("\u0000")) throw new InvalidArgumentError(`${name} contains U+0000, which PostgreSQL text cannot store`);
  return v;
}

function isUniqueViolation(e: unknown): e is { code: string; constraint?: string } {
  return typeof e === "object" && e !== null && (e as { code?: unknown }).code === UNIQUE_VIOLATION;
}

export class PostgresSessionStore implements SessionStateStore {
  readonly pool: pg.Pool;
  private readonly sessions: string;
  private readonly runs: string;
  private readonly keyIndex: string;
  private readonly broken: PostgresDefect | undefined;

  constructor(opts: PostgresStoreOptions = {}) {
    const prefix = opts.tablePrefix ?? DEFAULT_TABLE_PREFIX;
    if (!/^[a-z_][a-z0-9_]{0,40}$/.test(prefix)) throw new Error(`table prefix must match [a-z_][a-z0-9_]{0,40}: ${prefix}`);
    this.sessions = `${prefix}sessions`;
    this.runs = `${prefix}runs`;
    this.keyIndex = `${prefix}runs_request_key`;
    this.broken = opts.broken;
    const timeout = opts.statementTimeoutMs ?? 10_000;
    this.pool = new pg.Pool({
      connectionString: opts.connectionString ?? DEFAULT_POSTGRES_URL,
      max: opts.maxConnections ?? 16,
      connectionTimeoutMillis: timeout,
      statement_timeout: timeout,
      query_timeout: timeout + 1_000,
    });
    // An idle client that loses its connection must not crash the process.
    this.pool.on("error", () => {});
  }

  /** Creates the tables and the index if missing. Safe to run from many processes at once. */
  async migrate(): Promise<void> {
    const statuses = RUN_STATUSES.map((s) => `'${s}'`).join(", ");
    await this.transaction(async (c) => {
      await c.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`${this.runs} migrate`]);
      await c.query(`CREATE TABLE IF NOT EXISTS ${this.sessions} (session_id text PRIMARY KEY)`);
      await c.query(`CREATE TABLE IF NOT EXISTS ${this.runs} (
        session_id text NOT NULL REFERENCES ${this.sessions} (session_id) ON DELETE CASCADE,
        run_id text NOT NULL,
        status text NOT NULL CHECK (status IN (${statuses})),
        start_sequence integer NOT NULL CHECK (start_sequence >= 1),
        request_key text,
        request_digest text,
        start_digest text NOT NULL,
        input json NOT NULL,
        PRIMARY KEY (session_id, run_id),
        UNIQUE (session_id, start_sequence),
        CHECK ((request_key IS NULL) = (request_digest IS NULL))
      )`);
      await c.query(`CREATE UNIQUE INDEX IF NOT EXISTS ${this.keyIndex} ON ${this.runs} (session_id, request_key) WHERE request_key IS NOT NULL`);
    });
  }

  /** Drops this store's tables (tests with their own prefix only). */
  async dropTables(): Promise<void> {
    await this.pool.query(`DROP TABLE IF EXISTS ${this.runs}, ${this.sessions}`);
  }

  async close(): Promise<void> {
    await this.pool.end();
  }

  /** Runs `work` in a transaction: COMMIT if it resolves, ROLLBACK if it throws. */
  private async transaction<T>(work: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken = false;
    try {
      await client.query("BEGIN");
      const result = await work(client);
      await client.query("COMMIT");
      return result;
    } catch (e) {
      try {
        await client.query("ROLLBACK");
      } catch {
        broken = true; // the connection is gone; do not return it to the pool
      }
      throw e;
    } finally {
      client.release(broken);
    }
  }

  async commitRunStart(start: StartRun): Promise<CommitRunStartResult> {
    storable("sessionId", start.sessionId);
    storable("runId", start.runId);
    if (start.expectedCurrentRunId !== null) storable("expectedCurrentRunId", start.expectedCurrentRunId);
    if (start.requestKey !== undefined) storable("requestKey", start.requestKey);
    if (start.requestDigest !== undefined) storable("requestDigest", start.requestDigest);
    // A U+0000 in a string is written as the escape `\u0000`, which a
    // Postgres `json` value keeps as written (only `jsonb` refuses it), so
    // every input is stored: SPEC 4 lets a store refuse none.
    const input = stringifyJson(start.input ?? null);
    const digest = startDigest(start);

    for (let attempt = 1; ; attempt++) {
      try {
        return await this.transaction((c) => this.commitIn(c, start, input, digest));
      } catch (e) {
        if (!isUniqueViolation(e) || e.constraint !== this.keyIndex || start.requestKey === undefined) throw e;
        // The backstop fired: another run of the session holds the key. Name it.
        const holder = await this.pool.query<{ run_id: string }>(
          `SELECT run_id FROM ${this.runs} WHERE session_id = $1 AND request_key = $2`,
          [start.sessionId, start.requestKey],
        );
        const existingRunId = holder.rows[0]?.run_id;
        if (existingRunId !== undefined) throw new RunStartRejectedError("request_key_taken", { existingRunId });
        // The holder was deleted in between: the key is free again, so commit afresh.
        if (attempt >= MAX_COMMIT_ATTEMPTS) throw e;
      }
    }
  }

  /** SPEC 4's four ordered rules, inside the transaction of `c`. */
  private async commitIn(c: pg.PoolClient, start: StartRun, input: string, digest: string): Promise<CommitRunStartResult> {
    const { sessionId, runId } = start;
    // Lock the session's row (creating it if needed); every commit of this session waits here.
    await c.query(
      this.broken === "no-lock"
        ? `INSERT INTO ${this.sessions} (session_id) VALUES ($1) ON CONFLICT (session_id) DO NOTHING`
        : `INSERT INTO ${this.sessions} (session_id) VALUES ($1)
       ON CONFLICT (session_id) DO UPDATE SET session_id = EXCLUDED.session_id`,
      [sessionId],
    );
    // 1. Same-runId replay.
    const same = await c.query<RunRow & { start_digest: string }>(
      `SELECT ${RUN_COLUMNS}, start_digest FROM ${this.runs} WHERE session_id = $1 AND run_id = $2`,
      [sessionId, runId],
    );
    const existing = same.rows[0];
    if (existing !== undefined) {
      if (existing.start_digest === digest) return { outcome: "replayed", run: toRun(existing) };
      throw new RunStartRejectedError("run_id_conflict", { existingRunId: runId });
    }
    // 2. Key holder, read under the session's row lock.
    if (start.requestKey !== undefined && this.broken !== "no-key-rule") {
      const holder = await c.query<{ run_id: string }>(
        `SELECT run_id FROM ${this.runs} WHERE session_id = $1 AND request_key = $2`,
        [sessionId, start.requestKey],
      );
      const holderId = holder.rows[0]?.run_id;
      if (holderId !== undefined) throw new RunStartRejectedError("request_key_taken", { existingRunId: holderId });
    }
    // 3. CAS on the current run.
    const cur = await c.query<{ run_id: string; start_sequence: number }>(
      `SELECT run_id, start_sequence FROM ${this.runs} WHERE session_id = $1 ORDER BY start_sequence DESC LIMIT 1`,
      [sessionId],
    );
    const current = cur.rows[0];
    if ((current?.run_id ?? null) !== start.expectedCurrentRunId) {
      throw new RunStartRejectedError("cas_mismatch", { currentRunId: current?.run_id ?? null });
    }
    // 4. Write the run and its input.
    const inserted = await c.query<RunRow>(
      `INSERT INTO ${this.runs} (session_id, run_id, status, start_sequence, request_key, request_digest, start_digest, input)
       VALUES ($1, $2, 'running', $3, $4, $5, $6, $7::json) RETURNING ${RUN_COLUMNS}`,
      [sessionId, runId, (current?.start_sequence ?? 0) + 1, start.requestKey ?? null, start.requestDigest ?? null, digest, input],
    );
    const row = inserted.rows[0];
    if (row === undefined) throw new Error("INSERT ... RETURNING returned no row");
    return { outcome: "started", run: toRun(row) };
  }

  private async oneRun(sql: string, params: unknown[]): Promise<RunMetadata | null> {
    const r = await this.pool.query<RunRow>(sql, params);
    const row = r.rows[0];
    return row === undefined ? null : toRun(row);
  }

  async getRun(sessionId: string, runId: string): Promise<RunMetadata | null> {
    return this.oneRun(`SELECT ${RUN_COLUMNS} FROM ${this.runs} WHERE session_id = $1 AND run_id = $2`, [sessionId, runId]);
  }

  async getCurrentRun(sessionId: string): Promise<RunMetadata | null> {
    return this.oneRun(`SELECT ${RUN_COLUMNS} FROM ${this.runs} WHERE session_id = $1 ORDER BY start_sequence DESC LIMIT 1`, [sessionId]);
  }

  async listRuns(sessionId: string): Promise<RunMetadata[]> {
    const r = await this.pool.query<RunRow>(`SELECT ${RUN_COLUMNS} FROM ${this.runs} WHERE session_id = $1 ORDER BY start_sequence`, [sessionId]);
    return r.rows.map(toRun);
  }

  /** An index read on `(session_id, request_key)`. */
  async getRunByRequestKey(sessionId: string, requestKey: string): Promise<RunMetadata | null> {
    return this.oneRun(`SELECT ${RUN_COLUMNS} FROM ${this.runs} WHERE session_id = $1 AND request_key = $2`, [sessionId, requestKey]);
  }

  async listInputs(sessionId: string): Promise<InputRecord[]> {
    // As text: pg's type parser for json would JSON.parse it and respell the numbers.
    const r = await this.pool.query<{ run_id: string; input: string }>(
      `SELECT run_id, input::text AS input FROM ${this.runs} WHERE session_id = $1 ORDER BY start_sequence`,
      [sessionId],
    );
    return r.rows.map((row) => ({ runId: row.run_id, input: parseJson(row.input) }));
  }

  /**
   * One conditional UPDATE (only a live run changes), so it is atomic
   * without a transaction; when it changes nothing, a second read tells
   * `not_found` from `invalid_transition` (and if that read finds a live
   * run, created in between, the UPDATE runs again).
   */
  async setRunStatus(sessionId: string, runId: string, status: RunStatus): Promise<RunMetadata> {
    const live = LIVE_STATUSES.map((s) => `'${s}'`).join(", ");
    for (let attempt = 1; ; attempt++) {
      const updated = await this.oneRun(
        `UPDATE ${this.runs} SET status = $3 WHERE session_id = $1 AND run_id = $2 AND status IN (${live}) RETURNING ${RUN_COLUMNS}`,
        [sessionId, runId, status],
      );
      if (updated !== null) return updated;
      const run = await this.getRun(sessionId, runId);
      if (run === null) throw new NotFoundError(`no run ${runId} in session ${sessionId}`);
      if (isFinished(run.status)) throw new InvalidTransitionError(`run ${runId} is ${run.status}, which is final (asked: ${status})`);
      if (attempt >= MAX_COMMIT_ATTEMPTS) throw new Error(`run ${runId} kept changing under setRunStatus`);
    }
  }

  /** One DELETE of the session row; its runs, inputs and keys go with it (ON DELETE CASCADE). */
  async deleteSession(sessionId: string): Promise<boolean> {
    const r = await this.pool.query(`DELETE FROM ${this.sessions} WHERE session_id = $1`, [sessionId]);
    return (r.rowCount ?? 0) > 0;
  }
}
