/* An edge app in plain C on the fedcase client SDK's C interface (fedcase_client.h): one device
 * that trains the job's model, a small classifier of 8 sensor readings into 3 classes (one
 * hidden ReLU layer of 32, the model of examples/sdk_app/export_model.py), with its own C code
 * on its own data files, and scores it on its held-out files when the coordinator asks.
 *
 *   c_app --port 8080 --token ENROLLMENT_TOKEN --data data/device-0/train
 *         [--held-out data/device-0/held-out] [--host 127.0.0.1] [--state-dir DIR]
 *         [--name NAME] [--seconds S]
 *
 * Sample files hold float32 values: the 8 readings, then the class. Runs until SIGINT or
 * SIGTERM, or for S seconds. Built against the installed SDK:
 *   cc -O2 main.c $(pkg-config --cflags --libs fedcase_client) -lm -lpthread -o c_app */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <fedcase_client.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kInputs = 8, kHidden = 32, kClasses = 3 };
/* Parameter offsets in the job's order: hidden.weight [32, 8], hidden.bias [32],
 * out.weight [3, 32], out.bias [3]. */
enum {
  kW1 = 0,
  kB1 = kW1 + kHidden * kInputs,
  kW2 = kB1 + kHidden,
  kB2 = kW2 + kClasses * kHidden,
  kParameters = kB2 + kClasses
};
static const struct {
  const char* name;
  size_t dims;
  uint64_t shape[2];
} kLayout[] = {{"hidden.weight", 2, {kHidden, kInputs}},
               {"hidden.bias", 1, {kHidden}},
               {"out.weight", 2, {kClasses, kHidden}},
               {"out.bias", 1, {kClasses}}};

typedef struct Model {
  float w[kParameters];
  float velocity[kParameters]; /* SGD momentum, kept within a round */
  float start[kParameters];    /* the round's starting point, for FedProx */
} Model;

/* Reads the record at `position`: 8 inputs and the class. Returns 0 or a fedcase code. */
static int read_sample(fedcase_samples* samples, size_t position, float x[kInputs], int* label) {
  const uint8_t* data;
  size_t size;
  int rc = fedcase_samples_read(samples, position, &data, &size);
  if (rc != FEDCASE_OK) return rc;
  if (size != (kInputs + 1) * sizeof(float)) {
    fedcase_set_error("a record is not 9 float32 values");
    return FEDCASE_INVALID_ARGUMENT;
  }
  float target;
  memcpy(x, data, kInputs * sizeof(float));
  memcpy(&target, data + kInputs * sizeof(float), sizeof target);
  if (!(target >= 0 && target < kClasses) || floorf(target) != target) {
    fedcase_set_error("a record's class is not 0, 1 or 2");
    return FEDCASE_INVALID_ARGUMENT;
  }
  *label = (int)target;
  return FEDCASE_OK;
}

/* The forward pass: hidden activations and class probabilities; returns the loss. */
static float forward(const float* w, const float x[kInputs], int label, float hidden[kHidden],
                     float probs[kClasses]) {
  for (int h = 0; h < kHidden; ++h) {
    float z = w[kB1 + h];
    for (int i = 0; i < kInputs; ++i) z += w[kW1 + h * kInputs + i] * x[i];
    hidden[h] = z > 0 ? z : 0;
  }
  float top = -INFINITY;
  for (int c = 0; c < kClasses; ++c) {
    float z = w[kB2 + c];
    for (int h = 0; h < kHidden; ++h) z += w[kW2 + c * kHidden + h] * hidden[h];
    probs[c] = z;
    if (z > top) top = z;
  }
  float sum = 0;
  for (int c = 0; c < kClasses; ++c) sum += probs[c] = expf(probs[c] - top);
  for (int c = 0; c < kClasses; ++c) probs[c] /= sum;
  return -logf(fmaxf(probs[label], 1e-12f));
}

/* Adds one sample's cross-entropy gradient to `grad`. */
static void backward(const float* w, const float x[kInputs], int label, const float hidden[kHidden],
                     const float probs[kClasses], float* grad) {
  float d_hidden[kHidden] = {0};
  for (int c = 0; c < kClasses; ++c) {
    const float d = probs[c] - (c == label ? 1.f : 0.f);
    grad[kB2 + c] += d;
    for (int h = 0; h < kHidden; ++h) {
      grad[kW2 + c * kHidden + h] += d * hidden[h];
      d_hidden[h] += d * w[kW2 + c * kHidden + h];
    }
  }
  for (int h = 0; h < kHidden; ++h) {
    if (hidden[h] <= 0) continue;
    grad[kB1 + h] += d_hidden[h];
    for (int i = 0; i < kInputs; ++i) grad[kW1 + h * kInputs + i] += d_hidden[h] * x[i];
  }
}

static int prepare(void* user_data, const fedcase_model_info* model) {
  (void)user_data;
  if (strcmp(fedcase_model_loss(model), "cross_entropy") != 0 ||
      fedcase_model_tensor_count(model) != 4) {
    fedcase_set_error("this app trains the 8-32-3 sensor classifier with cross-entropy");
    return FEDCASE_INVALID_ARGUMENT;
  }
  for (size_t t = 0; t < 4; ++t) {
    size_t dims;
    const uint64_t* shape = fedcase_model_tensor_shape(model, t, &dims);
    if (strcmp(fedcase_model_tensor_name(model, t), kLayout[t].name) != 0 ||
        dims != kLayout[t].dims || memcmp(shape, kLayout[t].shape, dims * sizeof *shape) != 0) {
      fedcase_set_error("the job's parameters are not the sensor classifier's");
      return FEDCASE_INVALID_ARGUMENT;
    }
  }
  return FEDCASE_OK;
}

/* SGD over the round's samples in batches, as torch.optim.SGD with momentum, weight decay and
 * the FedProx term; reports each batch's per-sample losses after its step. */
static int train(void* user_data, const float* parameters, size_t count, fedcase_samples* samples,
                 const fedcase_train_settings* settings, float* out_parameters) {
  Model* m = user_data;
  if (count != kParameters) return FEDCASE_INVALID_ARGUMENT;
  memcpy(m->w, parameters, sizeof m->w);
  memcpy(m->start, parameters, sizeof m->start);
  memset(m->velocity, 0, sizeof m->velocity);
  const size_t n = fedcase_samples_size(samples);
  const size_t batch_size = settings->batch_size;
  float* losses = malloc(batch_size * sizeof *losses);
  float* grad = malloc(kParameters * sizeof *grad);
  int rc = losses && grad ? FEDCASE_OK : FEDCASE_RESOURCE_EXHAUSTED;
  for (size_t first = 0; first < n && rc == FEDCASE_OK; first += batch_size) {
    const size_t batch = first + batch_size <= n ? batch_size : n - first;
    memset(grad, 0, kParameters * sizeof *grad);
    for (size_t k = 0; k < batch && rc == FEDCASE_OK; ++k) {
      float x[kInputs], hidden[kHidden], probs[kClasses];
      int label;
      rc = read_sample(samples, first + k, x, &label);
      if (rc != FEDCASE_OK) break;
      losses[k] = forward(m->w, x, label, hidden, probs);
      backward(m->w, x, label, hidden, probs, grad);
    }
    if (rc != FEDCASE_OK) break;
    for (int p = 0; p < kParameters; ++p) {
      float g = grad[p] / (float)batch + (float)settings->weight_decay * m->w[p] +
                (float)settings->prox_mu * (m->w[p] - m->start[p]);
      m->velocity[p] = (float)settings->momentum * m->velocity[p] + g;
      m->w[p] -= (float)settings->lr * m->velocity[p];
    }
    rc = fedcase_samples_report_losses(samples, first, losses, batch);
  }
  free(losses);
  free(grad);
  if (rc == FEDCASE_OK) memcpy(out_parameters, m->w, sizeof m->w);
  return rc;
}

static int evaluate(void* user_data, const float* parameters, size_t count,
                    fedcase_samples* samples, fedcase_evaluation* out) {
  (void)user_data;
  if (count != kParameters) return FEDCASE_INVALID_ARGUMENT;
  const size_t n = fedcase_samples_size(samples);
  double loss = 0;
  size_t correct = 0;
  for (size_t p = 0; p < n; ++p) {
    float x[kInputs], hidden[kHidden], probs[kClasses];
    int label;
    int rc = read_sample(samples, p, x, &label);
    if (rc != FEDCASE_OK) return rc;
    loss += forward(parameters, x, label, hidden, probs);
    int best = 0;
    for (int c = 1; c < kClasses; ++c)
      if (probs[c] > probs[best]) best = c;
    correct += best == label;
  }
  int rc = fedcase_evaluation_set(out, n, n ? loss / (double)n : 0);
  if (rc == FEDCASE_OK)
    rc = fedcase_evaluation_set_metric(out, "accuracy", n ? (double)correct / (double)n : 0);
  return rc;
}

static fedcase_session* g_session;
static atomic_int g_finished; /* set when fedcase_session_run returned */

static void on_signal(int signal) {
  (void)signal;
  fedcase_session_stop(g_session); /* async-signal-safe */
}

static void* run_session(void* session) {
  if (fedcase_session_run(session) != FEDCASE_OK)
    fprintf(stderr, "c_app: %s\n", fedcase_last_error());
  atomic_store(&g_finished, 1);
  return NULL;
}

/* Exits with the SDK's message when a call failed. */
static void check(int rc, const char* what) {
  if (rc == FEDCASE_OK) return;
  fprintf(stderr, "c_app: %s: %s (%s)\n", what, fedcase_last_error(), fedcase_code_name(rc));
  exit(1);
}

int main(int argc, char** argv) {
  const char *host = "127.0.0.1", *token = getenv("FEDCASE_ENROLLMENT_TOKEN"), *data = NULL,
             *held_out = NULL, *state_dir = NULL, *name = "c-app";
  int port = 8080;
  double seconds = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *flag = argv[i], *value = argv[i + 1];
    if (!strcmp(flag, "--host"))
      host = value;
    else if (!strcmp(flag, "--port"))
      port = atoi(value);
    else if (!strcmp(flag, "--token"))
      token = value;
    else if (!strcmp(flag, "--data"))
      data = value;
    else if (!strcmp(flag, "--held-out"))
      held_out = value;
    else if (!strcmp(flag, "--state-dir"))
      state_dir = value;
    else if (!strcmp(flag, "--name"))
      name = value;
    else if (!strcmp(flag, "--seconds"))
      seconds = atof(value);
    else {
      fprintf(stderr, "c_app: unknown flag %s\n", flag);
      return 2;
    }
  }
  if (!data || !token || argc % 2 == 0) {
    fprintf(stderr, "usage: c_app --port P --token T --data DIR [--held-out DIR] ...\n");
    return 2;
  }
  printf("c_app: fedcase %s (ABI %d)\n", fedcase_version(), fedcase_abi_version());

  Model* model = calloc(1, sizeof *model);
  fedcase_trainer_callbacks callbacks = {sizeof callbacks, model, prepare, train, evaluate, free};
  fedcase_trainer* trainer;
  fedcase_source *train_data, *eval_data = NULL;
  fedcase_config* config;
  check(fedcase_trainer_new(&callbacks, &trainer), "trainer"); /* now owns `model` */
  check(fedcase_source_open_folder(data, &train_data), data);
  if (held_out) check(fedcase_source_open_folder(held_out, &eval_data), held_out);
  check(fedcase_config_new(&config), "config");
  check(fedcase_config_set_coordinator(config, host, (uint16_t)port), "coordinator");
  check(fedcase_config_set_enrollment_token(config, token), "token");
  check(fedcase_config_set_name(config, name), "name");
  check(fedcase_config_set_state_dir(config, state_dir), "state dir");
  check(fedcase_config_set_poll_wait(config, 1), "poll wait");
  check(fedcase_config_set_device_json(config, "{\"kind\": \"c-app\"}"), "device");
  check(fedcase_config_set_trainer(config, trainer), "trainer");
  check(fedcase_config_set_train_data(config, train_data), "training data");
  check(fedcase_config_set_eval_data(config, eval_data), "held-out data");
  check(fedcase_session_new(config, &g_session), "session");
  const size_t samples = fedcase_source_count(train_data);
  /* The session holds what it needs: the app's references go now. */
  fedcase_config_free(config);
  fedcase_trainer_free(trainer);
  fedcase_source_free(train_data);
  fedcase_source_free(eval_data);

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  printf("%s: %zu training samples, connecting to %s:%d\n", name, samples, host, port);
  fflush(stdout);
  pthread_t worker;
  if (pthread_create(&worker, NULL, run_session, g_session) != 0) return 1;
  const time_t start = time(NULL);
  uint64_t reported = 0;
  fedcase_session_stats stats;
  memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  for (;;) {
    struct timespec tick = {0, 100 * 1000 * 1000};
    nanosleep(&tick, NULL);
    check(fedcase_session_stats_get(g_session, &stats), "stats");
    if (stats.rounds_trained > reported) {
      reported = stats.rounds_trained;
      printf("%s: trained %llu round(s), %llu update(s) accepted\n", name,
             (unsigned long long)reported, (unsigned long long)stats.updates_accepted);
      fflush(stdout);
    }
    if (seconds > 0 && difftime(time(NULL), start) >= seconds) fedcase_session_stop(g_session);
    if (atomic_load(&g_finished)) break;
  }
  pthread_join(worker, NULL);
  printf("%s: stopped after %llu round(s), %llu failed\n", name,
         (unsigned long long)stats.rounds_trained, (unsigned long long)stats.rounds_failed);
  fedcase_session_free(g_session);
  return 0;
}
