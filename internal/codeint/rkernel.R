# dsec's R kernel for the code interpreter service (server.py): one Rscript
# process per context. Each stdin line is a cell: "ID CODEHEX ENVHEX", where
# ENVHEX is "KEYHEX=VALUEHEX" pairs joined by ",". Each stdout line is an
# event: "ID TYPE TEXTHEX", TYPE one of stdout, stderr, result, error, done.
# Expressions run in the global environment (state persists between cells);
# what they print is sent as stdout after each top-level expression, messages
# and warnings as stderr, and the last expression's value, when visible, as
# the result (its printed form, as R's console shows it).
hex2s <- function(h) {
  if (nchar(h) == 0) return("")
  rawToChar(as.raw(strtoi(substring(h, seq(1, nchar(h), 2), seq(2, nchar(h), 2)), 16L)))
}
s2hex <- function(s) paste(as.character(charToRaw(enc2utf8(paste(s, collapse = "\n")))), collapse = "")
.dsec_out <- stdout()
emit <- function(id, type, s) {
  cat(id, " ", type, " ", s2hex(s), "\n", sep = "", file = .dsec_out)
  flush(.dsec_out)
}
run_cell <- function(id, code, env) {
  before <- list()
  for (k in names(env)) before[[k]] <- Sys.getenv(k, unset = NA)
  if (length(env)) do.call(Sys.setenv, as.list(env))
  on.exit({
    for (k in names(before)) {
      if (is.na(before[[k]])) Sys.unsetenv(k) else do.call(Sys.setenv, setNames(list(before[[k]]), k))
    }
  })
  exprs <- tryCatch(parse(text = code), error = function(e) {
    emit(id, "error", conditionMessage(e))
    NULL
  })
  if (is.null(exprs)) return(invisible())
  n <- length(exprs)
  for (i in seq_len(n)) {
    res <- NULL
    failed <- FALSE
    printed <- capture.output({
      res <- withCallingHandlers(
        tryCatch(withVisible(eval(exprs[[i]], envir = globalenv())), error = function(e) {
          failed <<- TRUE
          conditionMessage(e)
        }),
        message = function(m) { emit(id, "stderr", conditionMessage(m)); invokeRestart("muffleMessage") },
        warning = function(w) { emit(id, "stderr", paste0("Warning: ", conditionMessage(w), "\n")); invokeRestart("muffleWarning") })
    })
    if (length(printed)) emit(id, "stdout", paste0(paste(printed, collapse = "\n"), "\n"))
    if (failed) {
      emit(id, "error", res)
      return(invisible())
    }
    if (isTRUE(res$visible)) {
      text <- paste(capture.output(print(res$value)), collapse = "\n")
      emit(id, if (i == n) "result" else "stdout", if (i == n) text else paste0(text, "\n"))
    }
  }
}
con <- file("stdin")
open(con)
emit("-", "ready", "")
while (length(line <- readLines(con, n = 1)) > 0) {
  parts <- strsplit(line, " ", fixed = TRUE)[[1]]
  if (length(parts) < 2) next
  env <- character()
  if (length(parts) >= 3 && nchar(parts[3]) > 0) {
    for (kv in strsplit(parts[3], ",", fixed = TRUE)[[1]]) {
      p <- strsplit(kv, "=", fixed = TRUE)[[1]]
      env[hex2s(p[1])] <- if (length(p) > 1) hex2s(p[2]) else ""
    }
  }
  run_cell(parts[1], hex2s(parts[2]), env)
  emit(parts[1], "done", "")
}
