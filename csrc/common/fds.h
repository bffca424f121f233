/* fds.h: receiving descriptors passed with SCM_RIGHTS, shared by dsec-init's
 * spawner and the dsec-fncall zygote (each a static binary of its own). */
#ifndef DSEC_COMMON_FDS_H
#define DSEC_COMMON_FDS_H

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* recv_fds collects the descriptors of a received message into fds, at most
 * max of them (the rest are closed), and returns how many it kept. */
static inline int recv_fds(struct msghdr *mh, int *fds, int max)
{
	int n = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (int i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
			if (n < max)
				fds[n++] = fd;
			else
				close(fd);
		}
	}
	return n;
}

#endif
