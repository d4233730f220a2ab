/* ModSecurity's XML body processor (seccoll.h says what): the body parsed
 * by libxml2 as ModSecurity 2.9 parses it — well-formedness required, no
 * network, no external DTD, entities left unexpanded (an XML external
 * entity attack cannot make sluice read a file or a URL) — and the XPath
 * expressions the rules name (the Core Rule Set's root element and all
 * attributes) evaluated once, at body time: each node's text content
 * becomes a value of XML, named by its expression. */
#include <string.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xpath.h>
#include "seccoll.h"

static void quiet(void *ctx, const char *msg, ...)
{
	(void)ctx, (void)msg;
}

int seccoll_xml_body(struct seccoll *c, const char *body, size_t len, const char *const *xpaths, size_t nxpaths)
{
	static int ready;
	if (!ready) {
		xmlInitParser();
		/* parse errors are the request's, reported as REQBODY_ERROR, not on stderr */
		xmlSetGenericErrorFunc(NULL, quiet);
		ready = 1;
	}
	if (len > 0x7fffffff)
		return -1;
	xmlDocPtr doc = xmlReadMemory(body, (int)len, NULL, NULL,
				      XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NOCDATA);
	if (!doc)
		return -1;
	xmlXPathContextPtr ctx = xmlXPathNewContext(doc);
	for (size_t i = 0; ctx && i < nxpaths; i++) {
		xmlXPathObjectPtr obj = xmlXPathEvalExpression((const xmlChar *)xpaths[i], ctx);
		if (!obj)
			continue;
		xmlNodeSetPtr nodes = obj->nodesetval;
		for (int k = 0; nodes && k < nodes->nodeNr; k++) {
			xmlChar *content = xmlNodeGetContent(nodes->nodeTab[k]);
			if (!content)
				continue;
			seccoll_add(c, SC_XML, xpaths[i], strlen(xpaths[i]), (const char *)content, strlen((const char *)content));
			xmlFree(content);
		}
		xmlXPathFreeObject(obj);
	}
	xmlXPathFreeContext(ctx);
	xmlFreeDoc(doc);
	return 0;
}
