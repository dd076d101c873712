// The schema of every backend, one migration per version, in SQL that each dialect renders
// (sql.h, Dialect): {id} is the column of an id the database assigns, from 1 and never reused,
// {int} a 64-bit integer, {real} a double, {bytes} a byte string kept as it is.

#include "storage/sql.h"

namespace fedcase::storage::sql {

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> kMigrations = {
      {1, R"sql(
      CREATE TABLE clients (
        id {id},
        token_hash TEXT NOT NULL UNIQUE,
        info TEXT NOT NULL,
        profile TEXT NOT NULL,
        registered_at {real} NOT NULL,
        last_seen {real} NOT NULL);
      CREATE TABLE jobs (
        id {id},
        name TEXT NOT NULL,
        config TEXT NOT NULL,
        state TEXT NOT NULL,
        policy_state TEXT NOT NULL,
        created_at {real} NOT NULL);
      CREATE TABLE rounds (
        job_id {int} NOT NULL REFERENCES jobs(id),
        idx {int} NOT NULL,
        state TEXT NOT NULL,
        base_version {int} NOT NULL,
        selected TEXT NOT NULL,
        opened_at {real} NOT NULL,
        deadline {real} NOT NULL,
        closed_at {real} NOT NULL,
        metrics TEXT NOT NULL,
        PRIMARY KEY (job_id, idx));
      CREATE TABLE updates (
        job_id {int} NOT NULL,
        round_idx {int} NOT NULL,
        client_id {int} NOT NULL REFERENCES clients(id),
        meta TEXT NOT NULL,
        received_at {real} NOT NULL,
        PRIMARY KEY (job_id, round_idx, client_id),
        FOREIGN KEY (job_id, round_idx) REFERENCES rounds(job_id, idx));
      CREATE TABLE models (
        job_id {int} NOT NULL REFERENCES jobs(id),
        version {int} NOT NULL,
        blob {bytes} NOT NULL,
        checksum TEXT NOT NULL,
        optimizer_state {bytes} NOT NULL,
        created_at {real} NOT NULL,
        PRIMARY KEY (job_id, version));
      )sql"},
      {2, R"sql(
      CREATE TABLE tenants (
        id {id},
        name TEXT NOT NULL UNIQUE,
        token_hash TEXT NOT NULL UNIQUE,
        weight {real} NOT NULL,
        limits TEXT NOT NULL,
        created_at {real} NOT NULL);
      ALTER TABLE jobs ADD COLUMN tenant_id {int} NOT NULL DEFAULT 0;
      )sql"},
      {3, R"sql(
      CREATE TABLE job_modules (
        job_id {int} PRIMARY KEY REFERENCES jobs(id),
        module {bytes} NOT NULL);
      )sql"},
      // Replicas: leases, admission through the store, partial aggregates, tenants' service.
      {4, R"sql(
      CREATE TABLE job_leases (
        job_id {int} PRIMARY KEY REFERENCES jobs(id),
        holder TEXT NOT NULL DEFAULT '',
        epoch {int} NOT NULL DEFAULT 0,
        expires_at {real} NOT NULL DEFAULT 0);
      INSERT INTO job_leases(job_id) SELECT id FROM jobs;
      ALTER TABLE rounds ADD COLUMN target {int} NOT NULL DEFAULT 0;
      ALTER TABLE rounds ADD COLUMN admitting {int} NOT NULL DEFAULT 1;
      ALTER TABLE rounds ADD COLUMN epoch {int} NOT NULL DEFAULT 0;
      ALTER TABLE updates ADD COLUMN state TEXT NOT NULL DEFAULT 'accepted';
      ALTER TABLE updates ADD COLUMN replica TEXT NOT NULL DEFAULT '';
      ALTER TABLE updates ADD COLUMN expires_at {real} NOT NULL DEFAULT 0;
      CREATE TABLE partials (
        job_id {int} NOT NULL,
        round_idx {int} NOT NULL,
        replica TEXT NOT NULL,
        sum {bytes} NOT NULL,
        weight {real} NOT NULL,
        updates {int} NOT NULL,
        written_at {real} NOT NULL,
        PRIMARY KEY (job_id, round_idx, replica),
        FOREIGN KEY (job_id, round_idx) REFERENCES rounds(job_id, idx));
      CREATE TABLE tenant_service (
        tenant_id {int} PRIMARY KEY,
        counter {real} NOT NULL DEFAULT 0,
        client_seconds {real} NOT NULL DEFAULT 0);
      )sql"},
      // Replicas serving the owner's open round: the invitees' tasks, as the owner planned them.
      {5, R"sql(
      ALTER TABLE rounds ADD COLUMN plan TEXT NOT NULL DEFAULT '{}';
      )sql"},
      // Secure rounds served by every replica: stage messages between clients and the owner.
      {6, R"sql(
      CREATE TABLE stage_messages (
        job_id {int} NOT NULL,
        round_idx {int} NOT NULL,
        kind TEXT NOT NULL,
        client_id {int} NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (job_id, round_idx, kind, client_id),
        FOREIGN KEY (job_id, round_idx) REFERENCES rounds(job_id, idx));
      )sql"},
      // Admission in one statement: a counter of the admitted updates on the round's row, and
      // no reservations (those of rounds open at the upgrade are dropped: the next start
      // fails such rounds anyway).
      {7, R"sql(
      ALTER TABLE rounds ADD COLUMN admitted {int} NOT NULL DEFAULT 0;
      DELETE FROM updates WHERE state <> 'accepted';
      UPDATE rounds SET admitted = (SELECT COUNT(*) FROM updates
        WHERE updates.job_id = rounds.job_id AND updates.round_idx = rounds.idx);
      ALTER TABLE updates DROP COLUMN state;
      ALTER TABLE updates DROP COLUMN expires_at;
      )sql"},
      // Upload sessions: an update arriving in chunks, stored in order, dropped with its round.
      // Models in pieces of 1 MiB, each stored once by its SHA-256 (a version shares its frozen
      // tensors with the earlier ones; neither database takes a value past 1 GB).
      {8, R"sql(
      CREATE TABLE model_chunks (
        sha256 TEXT PRIMARY KEY,
        data {bytes} NOT NULL);
      CREATE TABLE model_pieces (
        job_id {int} NOT NULL,
        version {int} NOT NULL,
        idx {int} NOT NULL,
        chunk TEXT NOT NULL REFERENCES model_chunks(sha256),
        PRIMARY KEY (job_id, version, idx),
        FOREIGN KEY (job_id, version) REFERENCES models(job_id, version));
      CREATE TABLE uploads (
        job_id {int} NOT NULL,
        round_idx {int} NOT NULL,
        id TEXT NOT NULL,
        client_id {int} NOT NULL,
        bytes {int} NOT NULL,
        chunk_bytes {int} NOT NULL,
        sha256 TEXT NOT NULL,
        meta TEXT NOT NULL,
        chunks {int} NOT NULL DEFAULT 0,
        seconds {real} NOT NULL DEFAULT 0,
        PRIMARY KEY (job_id, round_idx, id),
        UNIQUE (job_id, round_idx, client_id),
        FOREIGN KEY (job_id, round_idx) REFERENCES rounds(job_id, idx));
      CREATE TABLE upload_chunks (
        job_id {int} NOT NULL,
        round_idx {int} NOT NULL,
        upload_id TEXT NOT NULL,
        idx {int} NOT NULL,
        data {bytes} NOT NULL,
        PRIMARY KEY (job_id, round_idx, upload_id, idx));
      )sql"},
      // Replicas read the clients that changed since their last reading, not the whole table:
      // each client carries the number of its latest change (Store::clients_changed_after).
      {9, R"sql(
      ALTER TABLE clients ADD COLUMN change_seq {int} NOT NULL DEFAULT 0;
      UPDATE clients SET change_seq=id;
      CREATE INDEX clients_by_change ON clients(change_seq);
      )sql"},
      // Secure rounds' public keys, refused in the job's later rounds whichever replica owns
      // them (Store::put_used_keys).
      {10, R"sql(
      CREATE TABLE used_keys (
        job_id {int} NOT NULL REFERENCES jobs(id),
        round_idx {int} NOT NULL,
        public_key {bytes} NOT NULL,
        PRIMARY KEY (job_id, public_key));
      CREATE INDEX used_keys_by_round ON used_keys(job_id, round_idx);
      )sql"},
      // Contacts travel to the other replicas as one row per save (Store::contacts_after), not
      // as a change of each client's row: a replica reads batches, not the fleet's contacts.
      {11, R"sql(
      CREATE TABLE contact_batches (
        number {int} PRIMARY KEY,
        saved_at {real} NOT NULL,
        contacts TEXT NOT NULL);
      CREATE INDEX contact_batches_by_time ON contact_batches(saved_at);
      )sql"},
  };
  return kMigrations;
}

}  // namespace fedcase::storage::sql
