/* knn.h — exact k-nearest-neighbour queries on a fixed set of 3D points.
 *
 * DESIGN
 * A uniform grid over the points' bounding box (cells of about one point
 * each for a volume; a surface leaves most cells empty and a few points in
 * the others), the point indices sorted by cell (CSR). A query visits
 * shells of cells around its own (Chebyshev distance 0, 1, 2, ...) and
 * stops when it holds k points no farther than the searched box's nearest
 * face, so the answer is exact: the k smallest (squared distance, index)
 * pairs in lexicographic order — what a scan of every point in index order
 * keeping strictly nearer ones returns, ties included. Queries outside the
 * box work (the shells grow until they cover the grid). Build O(n), memory
 * O(n + cells); read-only after build, so threads may query concurrently.
 */
#ifndef DF_KNN_H
#define DF_KNN_H

#include <stdint.h>

typedef struct df_knn df_knn_t;

/* n >= 1 points [n,3] (copied). Returns 0, or -1 when out of memory or a
 * coordinate is not finite. */
int df_knn_build(const double *pts, int64_t n, df_knn_t **out);
void df_knn_free(df_knn_t **g);

/* The min(k, n) nearest points to q (k >= 1), nearest first: their indices
 * and squared distances. Returns how many. A non-finite q returns 0. */
int df_knn_query(const df_knn_t *g, const double q[3], int k, int64_t *idx, double *d2);

#endif
