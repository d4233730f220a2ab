<%@ page contentType="text/html; charset=UTF-8" session="false" import="java.security.MessageDigest" %><%
    // bench/offload: a JSP page that costs a few ms of CPU, deterministically:
    // @ITER@ rounds of SHA-256 over the previous digest (same result every time).
    // In the cluster set (the condition below true): every request has a session, made
    // when it has none (Set-Cookie: JSESSIONID=<id>.<jvmRoute>), and the
    // X-Route header names the server that answered: the session id's part
    // after the '.', the jvmRoute of this Tomcat's Engine.
    if (@SESSION@) {
        String sid = request.getSession(true).getId();
        int dot = sid.indexOf('.');
        response.setHeader("X-Route", dot >= 0 ? sid.substring(dot + 1) : "");
    }
    MessageDigest md = MessageDigest.getInstance("SHA-256");
    byte[] h = new byte[32];
    for (int i = 0; i < @ITER@; i++) {
        h = md.digest(h);
    }
    StringBuilder hex = new StringBuilder(64);
    for (byte b : h) {
        hex.append(Character.forDigit((b >> 4) & 15, 16)).append(Character.forDigit(b & 15, 16));
    }
%><!DOCTYPE html>
<html><head><title>offload</title></head>
<body>
<h1>Account summary</h1>
<p>digest after @ITER@ rounds: <%= hex %></p>
<table>
<tr><th>item</th><th>amount</th></tr>
<tr><td>alpha</td><td>100.00</td></tr>
<tr><td>beta</td><td>200.00</td></tr>
<tr><td>gamma</td><td>300.00</td></tr>
<tr><td>delta</td><td>400.00</td></tr>
</table>
<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut
labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris
nisi ut aliquip ex ea commodo consequat. Duis aute irure dolor in reprehenderit in voluptate velit
esse cillum dolore eu fugiat nulla pariatur.</p>
</body></html>
