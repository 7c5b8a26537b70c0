/* A scheduler's compute thread (pyggml/worker.py), compiled into pyggml._ggml by _build.py.

   It starts a submitted graph without waiting for Python's lock, which the submitting thread
   holds while it goes on (assembling the next batch); a Python thread started each compute
   only once that thread let go. It runs its jobs one after another, in the order submitted,
   and holds up to PYGGML_QUEUE of them: a job may wait behind the one computing, so that the
   next step starts the moment the last ends, with no thread hand-off between them. A queued
   job's inputs cannot be written into the graph's memory while the job before it computes
   there: they are staged in host memory, and the thread copies them in as the job starts; the
   outputs a job keeps are copied out as it ends, before the next job overwrites them. When a
   job fails, the jobs queued behind it do not run (GGML_STATUS_ABORTED): they took its
   results for theirs.

   Jobs are numbered from 1 as submitted (tickets); Python collects them in order, and a job
   is submitted only while fewer than PYGGML_QUEUE are submitted and not collected. */

#define PYGGML_QUEUE 2

typedef struct pyggml_copy {          /* size bytes between a tensor and host memory */
    struct ggml_tensor * tensor;
    void * data;
    size_t size;
} pyggml_copy;

typedef struct pyggml_job {
    ggml_backend_sched_t sched;
    struct ggml_cgraph * graph;
    const pyggml_copy * inputs;      /* staged: copied into the graph's tensors first */
    int n_inputs;
    const pyggml_copy * outputs;     /* kept: copied out of the graph's tensors after */
    int n_outputs;
    int status;
} pyggml_job;

typedef struct pyggml_compute_thread {
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t wake;             /* a job was submitted, or stop */
    pthread_cond_t finished_cond;    /* a job finished */
    pyggml_job jobs[PYGGML_QUEUE];   /* ticket t at jobs[t % PYGGML_QUEUE] */
    long long submitted, started, finished, collected;    /* tickets */
    int stop;
} pyggml_compute_thread;

static int pyggml_compute_threads = 0;     /* alive, under pyggml_compute_threads_mutex */
static pthread_mutex_t pyggml_compute_threads_mutex = PTHREAD_MUTEX_INITIALIZER;

static void pyggml_count_compute_threads(int delta) {
    pthread_mutex_lock(&pyggml_compute_threads_mutex);
    pyggml_compute_threads += delta;
    pthread_mutex_unlock(&pyggml_compute_threads_mutex);
}

static int pyggml_compute_threads_alive(void) {
    pthread_mutex_lock(&pyggml_compute_threads_mutex);
    int alive = pyggml_compute_threads;
    pthread_mutex_unlock(&pyggml_compute_threads_mutex);
    return alive;
}

static int pyggml_run_job(const pyggml_job * job) {
    for (int i = 0; i < job->n_inputs; i++) {
        const pyggml_copy * c = &job->inputs[i];
        ggml_backend_tensor_set(c->tensor, c->data, 0, c->size);
    }
    int status = ggml_backend_sched_graph_compute_async(job->sched, job->graph);
    ggml_backend_sched_synchronize(job->sched);
    if (status == GGML_STATUS_SUCCESS) {
        for (int i = 0; i < job->n_outputs; i++) {
            const pyggml_copy * c = &job->outputs[i];
            ggml_backend_tensor_get(c->tensor, c->data, 0, c->size);
        }
    }
    return status;
}

static void * pyggml_compute_serve(void * arg) {
    pyggml_compute_thread * t = (pyggml_compute_thread *) arg;
    int failed = 0;                  /* the last job failed: the ones queued behind it do not run */
    pthread_mutex_lock(&t->mutex);
    for (;;) {
        while (t->started == t->submitted && !t->stop) {
            pthread_cond_wait(&t->wake, &t->mutex);
        }
        if (t->started == t->submitted) {
            break;
        }
        long long ticket = ++t->started;
        pyggml_job job = t->jobs[ticket % PYGGML_QUEUE];
        pthread_mutex_unlock(&t->mutex);
        int status = failed ? GGML_STATUS_ABORTED : pyggml_run_job(&job);
        pthread_mutex_lock(&t->mutex);
        t->jobs[ticket % PYGGML_QUEUE].status = status;
        t->finished = ticket;
        /* a failure holds back what was queued behind it, not what comes after those */
        failed = status != GGML_STATUS_SUCCESS && t->submitted > ticket;
        pthread_cond_broadcast(&t->finished_cond);
    }
    pthread_mutex_unlock(&t->mutex);
    return NULL;
}

static pyggml_compute_thread * pyggml_compute_thread_new(void) {
    pyggml_compute_thread * t = (pyggml_compute_thread *) calloc(1, sizeof(*t));
    if (t == NULL) {
        return NULL;
    }
    pthread_mutex_init(&t->mutex, NULL);
    pthread_cond_init(&t->wake, NULL);
    pthread_cond_init(&t->finished_cond, NULL);
    if (pthread_create(&t->thread, NULL, pyggml_compute_serve, t) != 0) {
        pthread_cond_destroy(&t->finished_cond);
        pthread_cond_destroy(&t->wake);
        pthread_mutex_destroy(&t->mutex);
        free(t);
        return NULL;
    }
    pyggml_count_compute_threads(1);
    return t;
}

/* The new job's ticket, or 0 where PYGGML_QUEUE jobs are submitted and not collected. The
   copies' arrays (and what they point at) must live until the job is collected. */
static long long pyggml_compute_thread_submit(pyggml_compute_thread * t,
                                              ggml_backend_sched_t sched,
                                              struct ggml_cgraph * graph,
                                              const pyggml_copy * inputs, int n_inputs,
                                              const pyggml_copy * outputs, int n_outputs) {
    pthread_mutex_lock(&t->mutex);
    long long ticket = 0;
    if (t->submitted - t->collected < PYGGML_QUEUE && !t->stop) {
        ticket = ++t->submitted;
        pyggml_job job = {sched, graph, inputs, n_inputs, outputs, n_outputs, 0};
        t->jobs[ticket % PYGGML_QUEUE] = job;
        pthread_cond_signal(&t->wake);
    }
    pthread_mutex_unlock(&t->mutex);
    return ticket;
}

static int pyggml_compute_thread_done(pyggml_compute_thread * t, long long ticket) {
    pthread_mutex_lock(&t->mutex);
    int done = t->finished >= ticket;
    pthread_mutex_unlock(&t->mutex);
    return done;
}

/* Wait for the job of ticket, the next to collect, and take its status. */
static int pyggml_compute_thread_collect(pyggml_compute_thread * t, long long ticket) {
    pthread_mutex_lock(&t->mutex);
    int status = GGML_STATUS_FAILED;
    if (ticket == t->collected + 1 && ticket <= t->submitted) {
        while (t->finished < ticket) {
            pthread_cond_wait(&t->finished_cond, &t->mutex);
        }
        status = t->jobs[ticket % PYGGML_QUEUE].status;
        t->collected = ticket;
    }
    pthread_mutex_unlock(&t->mutex);
    return status;
}

/* Let the jobs submitted run, stop the thread and free it. */
static void pyggml_compute_thread_free(pyggml_compute_thread * t) {
    pthread_mutex_lock(&t->mutex);
    t->stop = 1;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->mutex);
    pthread_join(t->thread, NULL);
    pyggml_count_compute_threads(-1);
    pthread_cond_destroy(&t->finished_cond);
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->mutex);
    free(t);
}
