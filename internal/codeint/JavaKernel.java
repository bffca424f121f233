// dsec's Java kernel for the code interpreter service (server.py): one JVM per
// context running JShell (the jdk.jshell API) with its local execution engine,
// so snippets run in this JVM and their state (variables, methods, classes,
// imports) persists between cells. Each stdin line is a cell, "ID CODEHEX
// ENVHEX" (ENVHEX: "KEYHEX=VALUEHEX" pairs joined by ","), or "! ID", which
// stops the running cell. Each stdout line is an event, "ID TYPE TEXTHEX",
// TYPE one of stdout, stderr, result, error, done. A cell's code is split into
// snippets as JShell reads them; System.out and System.err are streamed; a
// snippet that does not compile or throws ends the cell with an error; the
// value of the last snippet, when it is an expression with a value, is the
// result (a String or char as its text, other values as JShell shows them).
// The cell's environment variables are system properties while it runs (E2B's
// Java kernel gives them so); the process's are system properties from the
// start.
import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.stream.Collectors;

import jdk.jshell.Diag;
import jdk.jshell.EvalException;
import jdk.jshell.ExpressionSnippet;
import jdk.jshell.JShell;
import jdk.jshell.JShellException;
import jdk.jshell.Snippet;
import jdk.jshell.SnippetEvent;
import jdk.jshell.SourceCodeAnalysis;
import jdk.jshell.UnresolvedReferenceException;
import jdk.jshell.VarSnippet;

public final class JavaKernel {
    private static final PrintStream OUT = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
    private static volatile String current = "-";

    private static String hex(String s) {
        StringBuilder b = new StringBuilder();
        for (byte x : s.getBytes(StandardCharsets.UTF_8)) {
            b.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        }
        return b.toString();
    }

    private static String unhex(String h) {
        byte[] b = new byte[h.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
        }
        return new String(b, StandardCharsets.UTF_8);
    }

    private static void emit(String id, String type, String text) {
        synchronized (OUT) {
            OUT.print(id + " " + type + " " + hex(text) + "\n");
            OUT.flush();
        }
    }

    /** Stream sends what user code writes as events of the running cell, a line at a time. */
    private static final class Stream extends OutputStream {
        private final String type;
        private final java.io.ByteArrayOutputStream buf = new java.io.ByteArrayOutputStream();

        Stream(String type) {
            this.type = type;
        }

        @Override
        public synchronized void write(int b) {
            buf.write(b);
            if (b == '\n') {
                flush();
            }
        }

        @Override
        public synchronized void write(byte[] b, int off, int len) {
            buf.write(b, off, len);
            for (int i = off; i < off + len; i++) {
                if (b[i] == '\n') {
                    flush();
                    return;
                }
            }
        }

        @Override
        public synchronized void flush() {
            if (buf.size() > 0) {
                emit(current, type, buf.toString(StandardCharsets.UTF_8));
                buf.reset();
            }
        }
    }

    /** unquote reads JShell's rendering of a String or char value back into its text. */
    static String unquote(String v) {
        StringBuilder b = new StringBuilder();
        for (int i = 1; i < v.length() - 1; i++) {
            char c = v.charAt(i);
            if (c != '\\' || i + 1 >= v.length() - 1) {
                b.append(c);
                continue;
            }
            char n = v.charAt(++i);
            switch (n) {
                case 'b': b.append('\b'); break;
                case 't': b.append('\t'); break;
                case 'n': b.append('\n'); break;
                case 'f': b.append('\f'); break;
                case 'r': b.append('\r'); break;
                default:
                    if (n >= '0' && n <= '7') {
                        int j = i;
                        while (j < v.length() - 1 && j < i + 3 && v.charAt(j) >= '0' && v.charAt(j) <= '7') {
                            j++;
                        }
                        b.append((char) Integer.parseInt(v.substring(i, j), 8));
                        i = j - 1;
                    } else {
                        b.append(n);
                    }
            }
        }
        return b.toString();
    }

    private static String typeOf(Snippet s) {
        if (s instanceof VarSnippet) {
            return ((VarSnippet) s).typeName();
        }
        if (s instanceof ExpressionSnippet) {
            return ((ExpressionSnippet) s).typeName();
        }
        return null;
    }

    private static boolean isExpression(Snippet s) {
        return s instanceof ExpressionSnippet || (s instanceof VarSnippet && s.subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND);
    }

    private static String describe(JShellException e) {
        String name = e instanceof EvalException ? ((EvalException) e).getExceptionClassName() : e.getClass().getName();
        return name;
    }

    /** clean drops the wrapper classes JShell puts snippets in from a message ("REPL.$JShell$4.o" is o). */
    static String clean(String msg) {
        return msg == null ? "" : msg.replaceAll("REPL\\.\\$JShell\\$\\d+[A-Z]?\\.", "");
    }

    private static String trace(JShellException e) {
        StringBuilder b = new StringBuilder(describe(e));
        if (e.getMessage() != null) {
            b.append(": ").append(clean(e.getMessage()));
        }
        // The snippets' frames, as JShell shows them: "at METHOD (#SNIPPET:LINE)".
        for (StackTraceElement el : e.getStackTrace()) {
            String file = el.getFileName();
            if (file != null && file.startsWith("#")) {
                b.append("\n\tat ");
                if (!el.getMethodName().isEmpty()) {
                    b.append(el.getMethodName()).append(' ');
                }
                b.append('(').append(file).append(':').append(el.getLineNumber()).append(')');
            }
        }
        return b.toString();
    }

    private final JShell shell;

    private JavaKernel(JShell shell) {
        this.shell = shell;
    }

    /** run evaluates one cell, emitting its events; false when it failed. */
    private void run(String id, String code) {
        SourceCodeAnalysis sca = shell.sourceCodeAnalysis();
        String rest = code;
        SnippetEvent last = null;
        while (!rest.isBlank()) {
            SourceCodeAnalysis.CompletionInfo ci = sca.analyzeCompletion(rest);
            String src = ci.source();
            if (ci.completeness() == SourceCodeAnalysis.Completeness.DEFINITELY_INCOMPLETE || src == null) {
                src = rest; // let JShell say what is missing
                rest = "";
            } else {
                rest = ci.remaining();
            }
            if (src.isBlank()) {
                continue;
            }
            last = null;
            for (SnippetEvent e : shell.eval(src)) {
                if (e.causeSnippet() != null) {
                    continue; // an update of a dependent snippet
                }
                last = e;
                if (e.status() == Snippet.Status.REJECTED) {
                    List<Diag> ds = shell.diagnostics(e.snippet()).collect(Collectors.toList());
                    String msg = ds.stream().filter(Diag::isError).map(d -> d.getMessage(Locale.ROOT).replaceAll("\\n\\s*location: class\\s*(?=\\n|$)", "")).collect(Collectors.joining("\n"));
                    if (msg.isEmpty()) {
                        msg = "the snippet was rejected: " + e.snippet().source().strip();
                    }
                    emit(id, "error", "CompilationException\u0000" + msg + "\u0000" + msg + "\n" + e.snippet().source().strip());
                    return;
                }
                JShellException ex = e.exception();
                if (ex != null) {
                    String msg = ex instanceof UnresolvedReferenceException
                            ? "unresolved reference in " + ((UnresolvedReferenceException) ex).getSnippet().source().strip()
                            : clean(ex.getMessage());
                    emit(id, "error", describe(ex) + "\u0000" + msg + "\u0000" + trace(ex));
                    return;
                }
            }
        }
        if (last == null || !isExpression(last.snippet()) || last.value() == null) {
            return;
        }
        String type = typeOf(last.snippet());
        if (type == null || type.equals("void")) {
            return;
        }
        String v = last.value();
        if ((type.equals("String") || type.equals("java.lang.String") || type.equals("char")) && v.length() >= 2
                && (v.charAt(0) == '"' || v.charAt(0) == '\'')) {
            v = unquote(v);
        }
        emit(id, "result", v);
    }

    public static void main(String[] args) throws Exception {
        System.getenv().forEach((k, v) -> {
            if (System.getProperty(k) == null) {
                System.setProperty(k, v);
            }
        });
        PrintStream out = new PrintStream(new Stream("stdout"), true, StandardCharsets.UTF_8);
        PrintStream err = new PrintStream(new Stream("stderr"), true, StandardCharsets.UTF_8);
        System.setOut(out);
        System.setErr(err);
        JShell shell = JShell.builder().executionEngine("local").out(out).err(err).build();
        JavaKernel k = new JavaKernel(shell);
        LinkedBlockingQueue<String> cells = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                for (String line; (line = in.readLine()) != null; ) {
                    if (line.startsWith("! ")) {
                        if (line.substring(2).equals(current)) {
                            shell.stop();
                        }
                    } else if (!line.isBlank()) {
                        cells.put(line);
                    }
                }
            } catch (Exception e) {
                // stdin closed or unreadable: end
            }
            System.exit(0);
        }, "stdin");
        reader.setDaemon(true);
        reader.start();
        // Warm JShell up (its compiler) before saying ready.
        shell.eval("1");
        emit("-", "ready", "");
        while (true) {
            String[] parts = cells.take().split(" ", -1);
            if (parts.length < 2) {
                continue;
            }
            String id = parts[0];
            Map<String, String> env = new HashMap<>();
            if (parts.length >= 3 && !parts[2].isEmpty()) {
                for (String kv : parts[2].split(",")) {
                    int eq = kv.indexOf('=');
                    env.put(unhex(eq < 0 ? kv : kv.substring(0, eq)), eq < 0 ? "" : unhex(kv.substring(eq + 1)));
                }
            }
            Map<String, String> before = new HashMap<>();
            env.forEach((key, v) -> before.put(key, System.setProperty(key, v)));
            current = id;
            try {
                k.run(id, unhex(parts[1]));
            } catch (Exception e) {
                emit(id, "error", e.getClass().getName() + "\u0000" + e.getMessage() + "\u0000" + e);
            } finally {
                out.flush();
                err.flush();
                before.forEach((key, v) -> {
                    if (v == null) {
                        System.clearProperty(key);
                    } else {
                        System.setProperty(key, v);
                    }
                });
                current = "-";
                emit(id, "done", "");
            }
        }
    }
}
