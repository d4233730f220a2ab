"""A real Apache Tomcat 10 (Debian's `tomcat10` package) as a session-keeping
origin, for the session persistence tests.

Each Tomcat object is one separate JVM with its own CATALINA_BASE in the
test's directory (CATALINA_HOME stays /usr/share/tomcat10): a minimal
server.xml (one HTTP/1.1 connector on 127.0.0.1, a shutdown port, both
free ports; no AJP, no manager, no auto-deploy scanning), an Engine whose
jvmRoute is JVM_ROUTE, and a ROOT webapp holding counter.jsp:

    GET /counter.jsp        -> "count=<n> route=<jvmRoute> session=<id>"
    GET /counter.jsp?probe  -> "ready route=<jvmRoute>" (no session made)

The count lives in the HTTP session, so it climbs only while the client
comes back with its JSESSIONID cookie (or ;jsessionid= in the path) to the
Tomcat holding the session; Tomcat appends "." + jvmRoute to every session
id it issues, which is what route-based persistence keys on. The route is
read back from the Engine over JMX, not from our own config, so the body
shows what Tomcat really runs with.

java runs directly (no catalina.sh), so the Popen PID is the JVM: stop()
asks the shutdown port, then SIGTERM/SIGKILL by PID; kill() is SIGKILL at
once (a crash: sessions are lost, no SESSIONS.ser is written).
"""

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time

import harness as H

CATALINA_HOME = "/usr/share/tomcat10"
JAVA = shutil.which("java")

# Startup cost is mostly the JVM and the first JSP compilation (done inside
# start() by the probe): C1 only, the default CDS archive, the serial GC and
# small stacks cut it; /dev/urandom keeps session-id generation from waiting
# for entropy; EXIT_ON_INIT_FAILURE makes a taken port fail fast instead of
# leaving a JVM with no connector.
JVM_FLAGS = [
    "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k",
    "-Xms32m", "-Xmx256m", "-Djava.security.egd=file:/dev/./urandom",
    "-Djava.awt.headless=true",
    "-Dorg.apache.catalina.startup.EXIT_ON_INIT_FAILURE=true",
    # what catalina.sh adds on Java 9+ (Tomcat's leak-prevention code
    # reflects into these packages; without them it logs warnings)
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.rmi/sun.rmi.transport=ALL-UNNAMED",
]

DEFAULT_START_TIMEOUT = 60.0


def missing():
    """Why Tomcat cannot run here (a skip message), or None."""
    if not os.path.isfile(os.path.join(CATALINA_HOME, "bin", "bootstrap.jar")):
        return "Tomcat 10 not installed (%s; apt-get install tomcat10)" % CATALINA_HOME
    if JAVA is None:
        return "java not found on PATH (Tomcat 10 needs a JRE)"
    return None


# --------------------------------------------------------------------------
# CATALINA_BASE contents

SERVER_XML = """<?xml version="1.0" encoding="UTF-8"?>
<!-- One connector, no AJP, no lifecycle listeners (APR, leak prevention,
     global JNDI resources): nothing the tests need, all startup time. -->
<Server port="%(shutdown_port)d" address="127.0.0.1" shutdown="%(shutdown_cmd)s">
  <Service name="Catalina">
    <Connector protocol="HTTP/1.1" address="127.0.0.1" port="%(port)d"
               connectionTimeout="20000" minSpareThreads="2" maxThreads="64"%(connector)s/>
    <Engine name="Catalina" defaultHost="localhost"%(route)s>
      <Host name="localhost" appBase="webapps" autoDeploy="false"
            deployOnStartup="true" unpackWARs="false"/>
    </Engine>
  </Service>
</Server>
"""

# Default for every context. StandardManager writes no SESSIONS.ser
# (pathname="", also 10.1's default), so a restart loses the sessions like a
# cluster member that is not replicated; persist_sessions=True names the
# file, and sessions then survive a graceful stop (not a kill). No jar
# scanning: the webapp has no jars and no TLDs.
CONTEXT_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Context>
  %(manager)s
  <JarScanner scanClassPath="false" scanManifest="false" scanAllDirectories="false"/>
</Context>
"""

# The global web.xml normally comes from conf/ (170 KB of MIME types and
# servlets); this one declares only the default and JSP servlets.
GLOBAL_WEB_XML = """<?xml version="1.0" encoding="UTF-8"?>
<web-app xmlns="https://jakarta.ee/xml/ns/jakartaee" version="6.0" metadata-complete="true">
  <servlet>
    <servlet-name>default</servlet-name>
    <servlet-class>org.apache.catalina.servlets.DefaultServlet</servlet-class>
    <init-param><param-name>listings</param-name><param-value>false</param-value></init-param>
    <load-on-startup>1</load-on-startup>
  </servlet>
  <servlet>
    <servlet-name>jsp</servlet-name>
    <servlet-class>org.apache.jasper.servlet.JspServlet</servlet-class>
    <init-param><param-name>development</param-name><param-value>false</param-value></init-param>
    <load-on-startup>3</load-on-startup>
  </servlet>
  <servlet-mapping><servlet-name>default</servlet-name><url-pattern>/</url-pattern></servlet-mapping>
  <servlet-mapping><servlet-name>jsp</servlet-name><url-pattern>*.jsp</url-pattern></servlet-mapping>
  <session-config><session-timeout>30</session-timeout></session-config>
</web-app>
"""

APP_WEB_XML = """<?xml version="1.0" encoding="UTF-8"?>
<web-app xmlns="https://jakarta.ee/xml/ns/jakartaee" version="6.0" metadata-complete="true">
  <absolute-ordering/>
</web-app>
"""

# session="false" so the ?probe request makes no session; the count update
# is under the application lock (two requests of one session may race).
COUNTER_JSP = """<%@ page contentType="text/plain; charset=UTF-8" session="false"
    trimDirectiveWhitespaces="true"
    import="jakarta.servlet.http.HttpSession,java.lang.management.ManagementFactory,javax.management.ObjectName" %>
<%
  Object route = ManagementFactory.getPlatformMBeanServer()
      .getAttribute(new ObjectName("Catalina:type=Engine"), "jvmRoute");
  if (route == null) route = "none";
  if (request.getParameter("probe") != null) {
    out.print("ready route=" + route);
    return;
  }
  HttpSession s = request.getSession(true);
  int n;
  synchronized (application) {
    Integer c = (Integer) s.getAttribute("count");
    n = c == null ? 1 : c + 1;
    s.setAttribute("count", n);
  }
  out.print("count=" + n + " route=" + route + " session=" + s.getId());
%>
"""

LOGGING_PROPERTIES = """handlers = java.util.logging.ConsoleHandler
.handlers = java.util.logging.ConsoleHandler
.level = INFO
java.util.logging.ConsoleHandler.level = ALL
java.util.logging.ConsoleHandler.formatter = org.apache.juli.OneLineFormatter
"""


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _xml_attr(v):
    return (str(v).replace("&", "&amp;").replace('"', "&quot;")
            .replace("<", "&lt;").replace(">", "&gt;"))


# --------------------------------------------------------------------------

class Tomcat:
    """One Tomcat JVM. JVM_ROUTE None leaves jvmRoute unset (session ids
    without a suffix). CONNECTOR: extra <Connector> attributes
    ({"maxKeepAliveRequests": "-1"}, ...). PERSIST_SESSIONS: keep sessions
    across a graceful stop/restart (SESSIONS.ser), off by default."""

    def __init__(self, workdir, name="tomcat", jvm_route="t1", connector=None,
                 persist_sessions=False):
        self.name = name
        self.jvm_route = jvm_route
        self.base = os.path.join(str(workdir), name)
        self.port = H.free_port()
        self.shutdown_port = H.free_port()
        self._shutdown_cmd = "SHUTDOWN-" + secrets.token_hex(8)
        self.connector = dict(connector or {})
        self.persist_sessions = persist_sessions
        self.out_path = os.path.join(self.base, "logs", "catalina.out")
        self.proc = None
        self.start_seconds = None      # wall time of the last start(), for reports
        self._make_base()

    @property
    def address(self):
        return "%s:%d" % (H.HOST, self.port)

    # -- CATALINA_BASE
    def _make_base(self):
        """Write conf/, the ROOT webapp and the empty dirs Tomcat expects."""
        route = ' jvmRoute="%s"' % _xml_attr(self.jvm_route) if self.jvm_route else ""
        connector = "".join(' %s="%s"' % (k, _xml_attr(v)) for k, v in self.connector.items())
        conf = os.path.join(self.base, "conf")
        _write(os.path.join(conf, "server.xml"), SERVER_XML % {
            "shutdown_port": self.shutdown_port, "shutdown_cmd": self._shutdown_cmd,
            "port": self.port, "connector": connector, "route": route})
        manager = '<Manager pathname="%s"/>' % ("SESSIONS.ser" if self.persist_sessions else "")
        _write(os.path.join(conf, "context.xml"), CONTEXT_XML % {"manager": manager})
        _write(os.path.join(conf, "web.xml"), GLOBAL_WEB_XML)
        _write(os.path.join(conf, "logging.properties"), LOGGING_PROPERTIES)
        root = os.path.join(self.base, "webapps", "ROOT")
        _write(os.path.join(root, "WEB-INF", "web.xml"), APP_WEB_XML)
        _write(os.path.join(root, "counter.jsp"), COUNTER_JSP)
        for d in ("logs", "temp", "work", "lib"):
            os.makedirs(os.path.join(self.base, d), exist_ok=True)

    def command(self):
        cp = ":".join(os.path.join(CATALINA_HOME, "bin", j)
                      for j in ("bootstrap.jar", "tomcat-juli.jar"))
        return [JAVA] + JVM_FLAGS + [
            "-Djava.util.logging.config.file=" + os.path.join(self.base, "conf",
                                                              "logging.properties"),
            "-Djava.util.logging.manager=org.apache.juli.ClassLoaderLogManager",
            "-Dcatalina.home=" + CATALINA_HOME, "-Dcatalina.base=" + self.base,
            "-Djava.io.tmpdir=" + os.path.join(self.base, "temp"),
            "-classpath", cp, "org.apache.catalina.startup.Bootstrap", "start"]

    # -- lifecycle
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self):
        return self.proc.pid

    def launch(self):
        """Start the JVM and return at once (start two, then wait_ready()
        on each, to overlap their startup)."""
        assert not self.alive(), "%s already running" % self.name
        out = open(self.out_path, "ab")
        try:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=self.base,
                                         start_new_session=True)
        finally:
            out.close()
        self._launched = time.monotonic()
        return self

    def _probe(self):
        """True once counter.jsp answers (which compiles it, so a test's
        first real request does not pay for that)."""
        if self.proc.poll() is not None:
            raise RuntimeError("%s (pid %d) exited with %s during startup"
                               % (self.name, self.proc.pid, self.proc.returncode))
        if not H.port_accepts(self.port):
            return False
        try:
            r = H.http_request(self.port, "GET", "/counter.jsp?probe", timeout=20.0)
        except (OSError, H.ConnClosed):
            return False
        return r.status == 200 and r.body.startswith(b"ready ")

    def wait_ready(self, timeout=DEFAULT_START_TIMEOUT):
        try:
            H.wait_for(self._probe, timeout, interval=0.05,
                       what="%s counter.jsp on port %d" % (self.name, self.port))
        except Exception as e:
            out = H.read_text(self.out_path)[-4000:]
            self.stop()
            raise RuntimeError("%s did not become ready: %s\n--- catalina.out:\n%s"
                               % (self.name, e, out))
        self.start_seconds = time.monotonic() - self._launched
        return self

    def start(self, timeout=DEFAULT_START_TIMEOUT):
        """Launch and wait (with a deadline) until counter.jsp answers."""
        return self.launch().wait_ready(timeout)

    def _send_shutdown(self):
        try:
            with socket.create_connection((H.HOST, self.shutdown_port), timeout=2.0) as s:
                s.sendall(self._shutdown_cmd.encode() + b"\n")
            return True
        except OSError:
            return False

    def stop(self, grace=15.0):
        """Graceful: the shutdown port (Tomcat stops its connector, lets
        requests in flight finish, expires nothing), then SIGTERM and
        SIGKILL by PID if it takes longer than GRACE. Safe to call twice."""
        if self.proc is None:
            return None
        if self.proc.poll() is None and self._send_shutdown():
            try:
                self.proc.wait(timeout=grace * H.SLOW)
            except subprocess.TimeoutExpired:
                pass
        return H.kill_popen(self.proc, grace=5.0 * H.SLOW)

    def kill(self):
        """SIGKILL: a crash. In-memory sessions die with the JVM."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return H.kill_popen(self.proc, grace=5.0)

    def restart(self, timeout=DEFAULT_START_TIMEOUT):
        """stop() then start() on the same ports and CATALINA_BASE (same
        jvmRoute: what a real restart of a cluster member looks like)."""
        self.stop()
        return self.start(timeout)

    # -- client side
    def get(self, path="/counter.jsp", headers=None, timeout=H.DEFAULT_TIMEOUT):
        """One direct request (new connection), bypassing sluice."""
        return H.http_request(self.port, "GET", path, headers=headers, timeout=timeout)

    def diagnostics(self):
        return "--- %s catalina.out:\n%s" % (self.name, H.read_text(self.out_path)[-3000:])
