#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include "routestats.h"
#include "shm.h"

#define ROWS (SHM_MAX_WORKERS + 1)   /* the last row: workers that have exited */
#define RETIRED SHM_MAX_WORKERS

struct routestats_row {
	_Atomic uint64_t c[RS_N];
};

static char (*names)[SHM_NAME_MAX];
static struct routestats_row *rows;  /* [ROWS][ROUTESTATS_MAX], touched pages only */

int routestats_init(void)
{
	void *p = mmap(NULL, sizeof(*names) * ROUTESTATS_MAX, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	names = p;
	p = mmap(NULL, sizeof(*rows) * ROWS * ROUTESTATS_MAX, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	rows = p;
	return 0;
}

int routestats_slot_get(const char *name)
{
	int free_slot = -1;
	for (int i = 0; i < ROUTESTATS_MAX; i++) {
		if (names[i][0] == '\0') {
			free_slot = i;
			break;  /* slots are handed out in order and never freed */
		}
		if (strcmp(names[i], name) == 0)
			return i;
	}
	if (free_slot >= 0)
		snprintf(names[free_slot], SHM_NAME_MAX, "%s", name);
	return free_slot;
}

static struct routestats_row *row(int w, int slot)
{
	return &rows[(size_t)w * ROUTESTATS_MAX + (size_t)slot];
}

static void bump(_Atomic uint64_t *v, uint64_t n)
{
	atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + n, memory_order_relaxed);
}

void routestats_count(int w, int slot, int status_class, uint64_t bytes_out)
{
	if (slot < 0 || rows == NULL)
		return;
	struct routestats_row *r = row(w, slot);
	bump(&r->c[RS_REQUESTS], 1);
	bump(&r->c[status_class >= 1 && status_class <= 5 ? RS_1XX + status_class - 1 : RS_NONE], 1);
	bump(&r->c[RS_BYTES_OUT], bytes_out);
}

void routestats_add(int w, int slot, enum routestats_counter c)
{
	if (slot >= 0 && rows != NULL)
		bump(&row(w, slot)->c[c], 1);
}

void routestats_read(int slot, uint64_t out[RS_N])
{
	memset(out, 0, sizeof(uint64_t) * RS_N);
	for (int w = 0; w <= SHM_MAX_WORKERS; w++) {
		if (w != RETIRED && atomic_load_explicit(&shm->workers[w].pid, memory_order_relaxed) == 0)
			continue;
		for (int c = 0; c < RS_N; c++)
			out[c] += atomic_load_explicit(&row(w, slot)->c[c], memory_order_relaxed);
	}
}

void routestats_worker_retire(int w)
{
	for (int s = 0; s < ROUTESTATS_MAX && names[s][0]; s++)
		for (int c = 0; c < RS_N; c++) {
			uint64_t v = atomic_exchange(&row(w, s)->c[c], 0);
			if (v)
				bump(&row(RETIRED, s)->c[c], v);
		}
}
