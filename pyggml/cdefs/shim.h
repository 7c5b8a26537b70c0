/* pyggml's own C helpers (defined in _build.py): the error path for guarded calls. */

const char * pyggml_take_error(void);   /* the message of the last failed guarded call, or NULL */
void pyggml_install_abort_hook(void);

/* ggml's log lines, delivered to Python's logging (pyggml/log.py) */
extern "Python" void pyggml_on_log(enum ggml_log_level level, const char * text, void * user);
