/* The fedcase client SDK's C interface: what an app written in C, or in any language that
 * calls C (Kotlin and Java through JNI, Swift, Rust, Python), links to take part in federated
 * training with its own model and data. It wraps the C++ SDK (client_sdk/session.h) with the
 * same importance sampling, cache and profiling, in libfedcase_client.so (SONAME
 * libfedcase_client.so.1), which exports only the fedcase_* symbols below.
 *
 * Contracts that hold for every function:
 *  - Errors: functions that can fail return an int status, FEDCASE_OK (0) or one of the
 *    fedcase_code values; fedcase_last_error() then gives the message, on the calling thread.
 *    No C++ exception crosses this interface: every entry point catches everything, and so
 *    does every place the SDK calls back into the app.
 *  - Ownership: a handle made by fedcase_X_new/open is the caller's, released with
 *    fedcase_X_free (NULL is accepted and ignored). A handle passed to a setter is shared, not
 *    taken: the caller may free its own reference right after. Strings and buffers passed in
 *    are copied before the call returns, unless a function says otherwise. Pointers handed to
 *    a callback are valid only during that callback.
 *  - Thread safety: a handle is used by one thread at a time, unless a function says it is
 *    thread-safe. A session calls its trainer's and sources' callbacks on the thread that runs
 *    fedcase_session_run, one call at a time.
 *  - ABI: structs the app fills start with struct_size (set it to sizeof the struct); fields
 *    are only ever added at their end, so an app built against an older header keeps working.
 *    fedcase_abi_version() changes only when that promise is broken.
 *
 * docs/client_sdk.md ("The C interface") has a whole example; examples/c_app is an app. */
#ifndef FEDCASE_CLIENT_H
#define FEDCASE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FEDCASE_API __attribute__((visibility("default")))
#else
#define FEDCASE_API
#endif

#define FEDCASE_ABI_VERSION 1

/* Status codes. The numbers are part of the ABI: a new code is appended, never inserted. */
typedef enum fedcase_code {
  FEDCASE_OK = 0,
  FEDCASE_INVALID_ARGUMENT = 1, /* a bad argument or config; also a NULL handle */
  FEDCASE_UNAUTHENTICATED = 2,
  FEDCASE_PERMISSION_DENIED = 3,
  FEDCASE_NOT_FOUND = 4,
  FEDCASE_CONFLICT = 5, /* the right call in the wrong state (a session already running) */
  FEDCASE_TOO_LARGE = 6,
  FEDCASE_UNPROCESSABLE = 7,
  FEDCASE_RESOURCE_EXHAUSTED = 8,
  FEDCASE_UNAVAILABLE = 9,
  FEDCASE_INTERNAL = 10, /* an I/O failure, or a callback that threw */
  FEDCASE_CANCELLED = 11, /* a callback gave up the round (any non-zero return fails it) */
  FEDCASE_GONE = 12       /* what the call continues is no longer wanted (a dropped upload) */
} fedcase_code;

/* The SDK's version ("1.0.0") and its ABI version (FEDCASE_ABI_VERSION of the library).
 * Thread-safe; the string is static. */
FEDCASE_API const char* fedcase_version(void);
FEDCASE_API int fedcase_abi_version(void);
/* The stable lower-case name of a code ("invalid_argument"); "unknown" for any other value.
 * Thread-safe; the string is static. */
FEDCASE_API const char* fedcase_code_name(int code);
/* The message of the last call on this thread that failed; "" when none has. Valid until the
 * next fedcase_* call on this thread. Thread-safe (each thread has its own). */
FEDCASE_API const char* fedcase_last_error(void);
/* For callbacks: the message the SDK reports (and logs) when the callback returns non-zero.
 * Copies `message`; NULL clears it. Thread-safe (each thread has its own). */
FEDCASE_API void fedcase_set_error(const char* message);

/* ---- Sample sources: the app's local data, samples 0..count-1, each an opaque record ---- */

typedef struct fedcase_source fedcase_source;
/* The SDK's buffer for one record, handed to a source's read callback. */
typedef struct fedcase_record fedcase_record;

/* Copies `size` bytes into the record (replacing what it held). data may be NULL when size is
 * 0. FEDCASE_INVALID_ARGUMENT for a NULL record or NULL data with size > 0. */
FEDCASE_API int fedcase_record_assign(fedcase_record* record, const void* data, size_t size);

typedef struct fedcase_source_callbacks {
  uint32_t struct_size; /* sizeof(fedcase_source_callbacks) */
  void* user_data;      /* passed to every callback */
  /* The number of samples: asked once, when the source is made; must be >= 1. */
  size_t (*count)(void* user_data);
  /* The size of sample `id`'s record (what the cache is charged for it). */
  uint64_t (*sample_bytes)(void* user_data, size_t id);
  /* Reads sample `id`'s whole record into `out` with fedcase_record_assign; returns 0, or a
   * code (with fedcase_set_error) that fails the round. */
  int (*read)(void* user_data, size_t id, fedcase_record* out);
  /* Optional (NULL): called once, on the thread that drops the last reference, when the SDK
   * no longer needs user_data. */
  void (*release)(void* user_data);
} fedcase_source_callbacks;

/* A source over the app's callbacks. FEDCASE_INVALID_ARGUMENT for NULL arguments, a
 * struct_size below the first version's, a missing callback or a count of 0 (release is then
 * not called: user_data stays the caller's). */
FEDCASE_API int fedcase_source_new(const fedcase_source_callbacks* callbacks, fedcase_source** out);
/* Every regular file under `dir` in path order, one sample a file (FolderSource).
 * FEDCASE_NOT_FOUND when it is not a folder; FEDCASE_INVALID_ARGUMENT when it holds no file. */
FEDCASE_API int fedcase_source_open_folder(const char* dir, fedcase_source** out);
/* The number of samples (0 for NULL). */
FEDCASE_API size_t fedcase_source_count(const fedcase_source* source);
FEDCASE_API void fedcase_source_free(fedcase_source* source);

/* ---- Trainers: the app's model code ---- */

typedef struct fedcase_trainer fedcase_trainer;
/* The job's model, as a task describes it (valid during the prepare callback only). */
typedef struct fedcase_model_info fedcase_model_info;
/* The samples of one training pass or evaluation (valid during the callback only). */
typedef struct fedcase_samples fedcase_samples;
/* Where an evaluate callback puts its figures (valid during the callback only). */
typedef struct fedcase_evaluation fedcase_evaluation;

/* "cnn" | "mlp" (built-in models), "torchscript" or "blob"; and "cross_entropy" | "mse". */
FEDCASE_API const char* fedcase_model_kind(const fedcase_model_info* model);
FEDCASE_API const char* fedcase_model_loss(const fedcase_model_info* model);
/* The TorchScript module's bytes (size in *size), or NULL (size 0) for other kinds. */
FEDCASE_API const void* fedcase_model_module(const fedcase_model_info* model, size_t* size);
/* The model's tensors, in the order their values cross the trainer (the parameters, then the
 * buffers): their number, the name, shape and kind of tensor i (NULL / 0 / -1 for i out of
 * range; the shape has *dims entries), and the number of floats of all of them. A kind is
 * FEDCASE_PARAMETER (trained by gradients), FEDCASE_FLOAT_BUFFER (state the model updates
 * itself, such as BatchNorm's running statistics) or FEDCASE_INTEGER_BUFFER (a counter such
 * as num_batches_tracked, carried as whole float32 values). */
enum { FEDCASE_PARAMETER = 0, FEDCASE_FLOAT_BUFFER = 1, FEDCASE_INTEGER_BUFFER = 2 };
FEDCASE_API size_t fedcase_model_tensor_count(const fedcase_model_info* model);
FEDCASE_API const char* fedcase_model_tensor_name(const fedcase_model_info* model, size_t i);
FEDCASE_API const uint64_t* fedcase_model_tensor_shape(const fedcase_model_info* model, size_t i,
                                                       size_t* dims);
FEDCASE_API int fedcase_model_tensor_kind(const fedcase_model_info* model, size_t i);
/* 1 when the job trains tensor i, 0 when it is frozen (a job that fine-tunes part of its
 * model: leave it as it is; only the trained tensors are uploaded), -1 for i out of range. */
FEDCASE_API int fedcase_model_tensor_trainable(const fedcase_model_info* model, size_t i);
FEDCASE_API size_t fedcase_model_parameter_count(const fedcase_model_info* model);

/* Positions 0..size-1, in the order the SDK wants them trained (a sample may repeat). */
FEDCASE_API size_t fedcase_samples_size(const fedcase_samples* samples);
/* The sample id at `position` (an index into the source); SIZE_MAX when out of range. */
FEDCASE_API size_t fedcase_samples_id(const fedcase_samples* samples, size_t position);
/* The record at `position`, read through the SDK's cache: *data and *size point into the SDK's
 * memory, valid until the next read on these samples. An error (the source's, or
 * FEDCASE_INVALID_ARGUMENT out of range): return it from the callback. */
FEDCASE_API int fedcase_samples_read(fedcase_samples* samples, size_t position,
                                     const uint8_t** data, size_t* size);
/* The losses of positions [first, first + count), one per sample, once per batch in training
 * order right after the batch's optimizer step (they drive the sampler and the cache). Each must
 * be finite and >= 0 and within the round's positions: otherwise FEDCASE_INVALID_ARGUMENT and
 * the round fails. Evaluation takes no losses. */
FEDCASE_API int fedcase_samples_report_losses(fedcase_samples* samples, size_t first,
                                              const float* losses, size_t count);

/* The number of samples scored and their mean loss (finite, >= 0). */
FEDCASE_API int fedcase_evaluation_set(fedcase_evaluation* evaluation, uint64_t samples,
                                       double loss);
/* A named metric: 1 to 64 letters, digits or '_', finite value >= 0 ("accuracy" in [0, 1]). */
FEDCASE_API int fedcase_evaluation_set_metric(fedcase_evaluation* evaluation, const char* name,
                                              double value);

/* How the task asks the model to be trained. Made by the SDK: new fields go at the end. */
typedef struct fedcase_train_settings {
  uint64_t batch_size;
  double lr;
  double momentum;
  double weight_decay;
  double prox_mu; /* FedProx: adds mu/2 * ||w - w_start||^2 to the loss when > 0 */
} fedcase_train_settings;

typedef struct fedcase_trainer_callbacks {
  uint32_t struct_size; /* sizeof(fedcase_trainer_callbacks) */
  void* user_data;
  /* Gets ready for `model`; a non-zero return (with fedcase_set_error saying why) means this
   * app cannot train it: the session sends no update and backs off. */
  int (*prepare)(void* user_data, const fedcase_model_info* model);
  /* Trains from `parameters` (`count` floats, the model's tensor order) over every position
   * of `samples`, reporting each batch's losses, and writes the `count` new parameters (all
   * finite) to `out_parameters`, a buffer the SDK owns. Non-zero discards the round. */
  int (*train)(void* user_data, const float* parameters, size_t count, fedcase_samples* samples,
               const fedcase_train_settings* settings, float* out_parameters);
  /* Scores `parameters` on every position of `samples` and sets `out`. Non-zero: no report. */
  int (*evaluate)(void* user_data, const float* parameters, size_t count, fedcase_samples* samples,
                  fedcase_evaluation* out);
  /* Optional (NULL), as fedcase_source_callbacks.release. */
  void (*release)(void* user_data);
} fedcase_trainer_callbacks;

/* A trainer over the app's callbacks (prepare, train and evaluate required). */
FEDCASE_API int fedcase_trainer_new(const fedcase_trainer_callbacks* callbacks,
                                    fedcase_trainer** out);
/* The SDK's ready trainer for any TorchScript module (make_torchscript_trainer): records are
 * float32 inputs of `input_shape` (`dims` dimensions, each >= 1), then the target. */
FEDCASE_API int fedcase_trainer_new_torchscript(const int64_t* input_shape, size_t dims,
                                                fedcase_trainer** out);
FEDCASE_API void fedcase_trainer_free(fedcase_trainer* trainer);

/* ---- Sessions ---- */

typedef struct fedcase_config fedcase_config;
typedef struct fedcase_session fedcase_session;

/* A config with the C++ SessionConfig's defaults (127.0.0.1:8080, no TLS, seed 1, 10 s long
 * polls). */
FEDCASE_API int fedcase_config_new(fedcase_config** out);
FEDCASE_API void fedcase_config_free(fedcase_config* config);
FEDCASE_API int fedcase_config_set_coordinator(fedcase_config* config, const char* host,
                                               uint16_t port);
/* TLS with a CA file; cert_file and key_file (both or neither, may be NULL) for mutual TLS. */
FEDCASE_API int fedcase_config_set_tls(fedcase_config* config, const char* ca_file,
                                       const char* cert_file, const char* key_file);
FEDCASE_API int fedcase_config_set_enrollment_token(fedcase_config* config, const char* token);
FEDCASE_API int fedcase_config_set_name(fedcase_config* config, const char* name);
/* Where the sampler's weights persist across restarts; "" or NULL: nowhere. */
FEDCASE_API int fedcase_config_set_state_dir(fedcase_config* config, const char* dir);
FEDCASE_API int fedcase_config_set_seed(fedcase_config* config, uint64_t seed);
FEDCASE_API int fedcase_config_set_cache_capacity(fedcase_config* config, uint64_t bytes);
/* Long-poll wait per task request, in seconds (> 0, at most 300); also bounds how long
 * fedcase_session_stop may take to be noticed while no task runs. */
FEDCASE_API int fedcase_config_set_poll_wait(fedcase_config* config, double seconds);
/* The device facts sent at registration: a JSON object (docs/protocol.md). */
FEDCASE_API int fedcase_config_set_device_json(fedcase_config* config, const char* json);
FEDCASE_API int fedcase_config_set_label(fedcase_config* config, const char* key,
                                         const char* value);
/* Required: the trainer and the training samples. The held-out samples (for federated
 * evaluation) are optional; NULL clears them. */
FEDCASE_API int fedcase_config_set_trainer(fedcase_config* config, fedcase_trainer* trainer);
FEDCASE_API int fedcase_config_set_train_data(fedcase_config* config, fedcase_source* source);
FEDCASE_API int fedcase_config_set_eval_data(fedcase_config* config, fedcase_source* source);

/* Checks the config and opens the local data (restoring the state in the state dir), as
 * Session::create: FEDCASE_INVALID_ARGUMENT names what is missing or wrong. The config may be
 * freed right after. */
FEDCASE_API int fedcase_session_new(const fedcase_config* config, fedcase_session** out);
/* Registers, then polls, trains and uploads until fedcase_session_stop. Blocks; run it on a
 * thread of the app's choosing, which the callbacks then run on. FEDCASE_CONFLICT when the
 * session runs already on another thread. A stop is final: once asked, run returns at once. */
FEDCASE_API int fedcase_session_run(fedcase_session* session);
/* Asks a running (or not yet running) session to stop: fedcase_session_run returns after the
 * task under way, if any. Thread-safe and async-signal-safe (it stores one atomic flag). */
FEDCASE_API void fedcase_session_stop(fedcase_session* session);

typedef struct fedcase_session_stats {
  uint32_t struct_size; /* the caller sets sizeof(fedcase_session_stats) */
  uint64_t rounds_trained;
  uint64_t rounds_failed; /* the trainer or the data failed the round: nothing was sent */
  uint64_t updates_accepted;
  uint64_t updates_refused;
  uint64_t updates_skipped; /* not sent: the round no longer needed them */
  uint64_t model_downloads;
  uint64_t reconnects;
} fedcase_session_stats;
/* The session's counters. Thread-safe (while another thread runs the session). */
FEDCASE_API int fedcase_session_stats_get(const fedcase_session* session,
                                          fedcase_session_stats* out);
/* The id the coordinator gave this client; 0 before registration. Thread-safe. */
FEDCASE_API uint64_t fedcase_session_client_id(const fedcase_session* session);
/* Frees a session that is not running (stop it and let fedcase_session_run return first). */
FEDCASE_API void fedcase_session_free(fedcase_session* session);

/* ---- One round without a coordinator: the local data pipeline on its own ----
 * The same planning, cache and sampler a session runs, for tests, benchmarks and offline use:
 * the same seed, source and directives give the same read plan as the C++ LocalData. */

typedef struct fedcase_local_data fedcase_local_data;

typedef enum fedcase_sampling {
  FEDCASE_SAMPLING_UNIFORM = 0,
  FEDCASE_SAMPLING_IMPORTANCE = 1
} fedcase_sampling;
typedef enum fedcase_cache_policy {
  FEDCASE_CACHE_NONE = 0,
  FEDCASE_CACHE_LRU = 1,
  FEDCASE_CACHE_IMPORTANCE = 2
} fedcase_cache_policy;

typedef enum fedcase_repetition {
  FEDCASE_REPETITION_FIXED = 0,   /* each cached draw serves repetition_factor uses */
  FEDCASE_REPETITION_ADAPTIVE = 1 /* the FedCaSe artifact's rule (docs/client_sdk.md) */
} fedcase_repetition;

/* What a task asks of the local data (DataDirectives). A caller built before `repetition`
 * existed passes a smaller struct_size and gets FEDCASE_REPETITION_FIXED. */
typedef struct fedcase_directives {
  uint32_t struct_size;   /* sizeof(fedcase_directives) */
  int sampling;           /* fedcase_sampling */
  uint64_t sample_budget; /* samples per round, repeats included; 0 = epochs x samples */
  uint64_t epochs;
  int cache_policy; /* fedcase_cache_policy */
  uint64_t cache_budget_bytes;
  double repetition_factor; /* >= 1 */
  int repetition;           /* fedcase_repetition */
} fedcase_directives;

/* One round's figures (RoundStats). */
typedef struct fedcase_round_stats {
  uint32_t struct_size; /* the caller sets sizeof(fedcase_round_stats) */
  uint64_t samples;
  double loss_sum;
  double loss_sq_sum;
  double compute_s;
  uint64_t cache_hits;
  uint64_t cache_misses;
  uint64_t bytes_read;
  double io_s;
} fedcase_round_stats;

/* The pipeline over `source` (shared), sampling with `seed`, its state in `state_dir` (NULL or
 * "": none), caches capped at `cache_capacity_bytes` (0: no cap). */
FEDCASE_API int fedcase_local_data_open(fedcase_source* source, uint64_t seed,
                                        const char* state_dir, uint64_t cache_capacity_bytes,
                                        fedcase_local_data** out);
/* Has `trainer` (prepared by the app: no prepare callback is made) train one round from
 * `parameters` (`count` floats) as `directives` ask; writes the new parameters to
 * `out_parameters` (`count` floats, the caller's) and, when `stats` is not NULL, the figures.
 * The trainer's errors come back as they were returned (a thrown exception as
 * FEDCASE_INTERNAL). */
FEDCASE_API int fedcase_local_data_train_round(fedcase_local_data* data, fedcase_trainer* trainer,
                                               const float* parameters, size_t count,
                                               const fedcase_train_settings* settings,
                                               const fedcase_directives* directives,
                                               float* out_parameters, fedcase_round_stats* stats);
FEDCASE_API void fedcase_local_data_free(fedcase_local_data* data);

#ifdef __cplusplus
}
#endif

#endif /* FEDCASE_CLIENT_H */
