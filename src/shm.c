#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "shm.h"
#include "util.h"

struct shm *shm;

int shm_init(void)
{
	void *p = mmap(NULL, sizeof(struct shm), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	shm = p;
	atomic_store(&shm->inspect_on, 1);
	atomic_store(&shm->started, (int64_t)time(NULL));
	atomic_store(&shm->master_pid, getpid());
	for (int i = 0; i < SHM_MAX_WORKERS; i++) {
		/* Created up front: a worker only inherits fds that exist when it
		 * is forked, and it must be able to kick workers forked later. */
		shm->workers[i].efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (shm->workers[i].efd < 0)
			return -1;
	}
	return 0;
}

int shm_slot_find(const char *name)
{
	for (int i = 0; i < SHM_MAX_SLOTS; i++)
		if (strcmp(shm->slots[i].name, name) == 0)
			return i;
	return -1;
}

int shm_slot_get(const char *name)
{
	int i = shm_slot_find(name);
	if (i >= 0)
		return i;
	for (i = 0; i < SHM_MAX_SLOTS; i++) {
		if (shm->slots[i].name[0] == '\0') {
			snprintf(shm->slots[i].name, SHM_NAME_MAX, "%s", name);
			atomic_store(&shm->slots[i].up, 1);
			return i;
		}
	}
	return -1;
}

int shm_worker_alloc(void)
{
	for (int i = 0; i < SHM_MAX_WORKERS; i++)
		if (atomic_load(&shm->workers[i].pid) == 0)
			return i;
	return -1;
}

void shm_worker_reclaim(int w)
{
	for (int s = 0; s < SHM_MAX_SLOTS; s++) {
		for (int c = 0; c < SHM_NCOUNTERS; c++) {
			uint32_t held = atomic_exchange(&shm->contrib[w][s][c], 0);
			if (held)
				atomic_fetch_sub(&shm->slots[s].c[c], held);
		}
	}
	for (int s = 0; s < SHM_MAX_SLOTS; s++)
		atomic_store(&shm->head_ticket[w][s], 0);
	for (int i = 0; i < STICK_SETS; i++) {
		uint32_t held = (uint32_t)w + 1;
		atomic_compare_exchange_strong(&shm->stick[i].lock, &held, 0);
	}
	uint64_t drain;
	while (read(shm->workers[w].efd, &drain, sizeof(drain)) == sizeof(drain))
		;
	atomic_store(&shm->workers[w].pid, 0);
}

void shm_add(int w, int slot, enum shm_counter c, int delta)
{
	/* The total moves before the contribution on increment and after it on
	 * decrement: a worker killed between the two can only make the master
	 * reclaim too little (one slot under-admitted until restart), never too
	 * much (which would let the cap be exceeded). */
	if (delta > 0) {
		atomic_fetch_add(&shm->slots[slot].c[c], (uint32_t)delta);
		atomic_fetch_add(&shm->contrib[w][slot][c], (uint32_t)delta);
	} else {
		atomic_fetch_sub(&shm->contrib[w][slot][c], (uint32_t)-delta);
		atomic_fetch_sub(&shm->slots[slot].c[c], (uint32_t)-delta);
	}
}

int shm_conns_reserve(int w, int slot, uint32_t max)
{
	_Atomic uint32_t *c = &shm->slots[slot].c[SHM_CONNS];
	uint32_t cur = atomic_load(c);
	while (cur < max) {
		if (atomic_compare_exchange_weak(c, &cur, cur + 1)) {
			atomic_fetch_add(&shm->contrib[w][slot][SHM_CONNS], 1);
			return 1;
		}
	}
	return 0;
}

void shm_kick_others(int w)
{
	uint64_t one = 1;
	for (int i = 0; i < SHM_MAX_WORKERS; i++) {
		if (i == w || atomic_load(&shm->workers[i].pid) == 0)
			continue;
		if (write(shm->workers[i].efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			continue;
	}
}

uint64_t shm_ticket_next(void)
{
	return atomic_fetch_add(&shm->ticket, 1) + 1;
}

void shm_head_publish(int w, int slot, uint64_t ticket)
{
	atomic_store_explicit(&shm->head_ticket[w][slot], ticket, memory_order_relaxed);
}

int shm_older_waiter(int w, int slot, uint64_t mine)
{
	for (int i = 0; i < SHM_MAX_WORKERS; i++) {
		if (i == w || atomic_load_explicit(&shm->workers[i].pid, memory_order_relaxed) == 0)
			continue;
		uint64_t t = atomic_load_explicit(&shm->head_ticket[i][slot], memory_order_relaxed);
		if (t && t < mine)
			return 1;
	}
	return 0;
}

/* The set of KEY, locked; NULL when another worker holds it too long (a
 * descheduled or stopped holder): the table is a cache, a miss is fine,
 * and the event loop must not spin. */
static struct stick_set *stick_lock(int w, uint64_t key)
{
	struct stick_set *set = &shm->stick[(key >> 1) % STICK_SETS];
	for (int spin = 0; spin < 4096; spin++) {
		uint32_t free_ = 0;
		if (atomic_compare_exchange_weak_explicit(&set->lock, &free_, (uint32_t)w + 1,
							  memory_order_acquire, memory_order_relaxed))
			return set;
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
	return NULL;
}

static void stick_unlock(struct stick_set *set)
{
	atomic_store_explicit(&set->lock, 0, memory_order_release);
}

int shm_stick_get(int w, uint64_t key, uint32_t now_s, uint32_t ttl_s)
{
	key |= 1;  /* 0 marks a free entry; the set comes from the other bits */
	struct stick_set *set = stick_lock(w, key);
	int slot = -1;
	if (set == NULL)
		return -1;
	for (int i = 0; i < STICK_WAYS; i++) {
		struct stick_entry *e = &set->e[i];
		if (e->key != key)
			continue;
		if (now_s - e->used_s <= ttl_s) {
			e->used_s = now_s;
			slot = (int)e->slot;
		} else {
			e->key = 0;
		}
		break;
	}
	stick_unlock(set);
	return slot;
}

void shm_stick_put(int w, uint64_t key, int slot, uint32_t now_s)
{
	key |= 1;
	struct stick_set *set = stick_lock(w, key);
	if (set == NULL)
		return;
	struct stick_entry *victim = &set->e[0];
	for (int i = 0; i < STICK_WAYS; i++) {
		struct stick_entry *e = &set->e[i];
		if (e->key == key) {
			victim = e;
			break;
		}
		if (victim->key != 0 && (e->key == 0 || now_s - e->used_s > now_s - victim->used_s))
			victim = e;
	}
	/* The key last: a worker killed half-way leaves a free entry, not
	 * another key's server. */
	victim->key = 0;
	victim->slot = (uint32_t)slot;
	victim->used_s = now_s;
	atomic_thread_fence(memory_order_release);
	victim->key = key;
	stick_unlock(set);
}
