/* pyggml's own C helpers (defined in _build.py): the error path for guarded calls. */

const char * pyggml_take_error(void);   /* the message of the last failed guarded call, or NULL */
void pyggml_install_abort_hook(void);
